//! Groups in the simulation: members spread over orderingIds with drawn plans (the total carried
//! by the last member only, or in large groups by one or two members anywhere; some groups
//! failing fast, among them some of the largest total with only a few members produced), joins
//! enqueued by the nodes and consumed from the topic like any record, and the checks: every
//! group's join runs, as one task however many members triggered it, and is given every
//! member's outcome (under the member's own key) and result.

use super::*;
use scheduler_client::GroupMember;

/// The key of sub-task `i` (from 1) of the task with `parent`'s key.
pub(super) fn child_of(parent: &TaskKey, i: u64) -> TaskKey {
    TaskKey {
        scheduled_time: parent.scheduled_time + TimeDelta::milliseconds(500),
        ordering_id: format!("{}-c{i}", parent.uniqueness_key),
        uniqueness_key: "child".into(),
    }
}

impl World {
    /// A task that spawns one to three sub-tasks when it succeeds: their group is joined by its
    /// handler, checked like any group.
    pub(super) fn produce_parent(&mut self) {
        let ordering_id = format!("o{}", self.rng.usize(0..ORDERING_IDS));
        let at = self.now() + TimeDelta::milliseconds(self.rng.i64(300..4_000));
        let plan = Plan::Succeed(Duration::from_millis(self.rng.u64(5..300)));
        let key = self.new_key(&ordering_id, at);
        self.produced.sequence.insert(key.clone(), self.next_unique);
        self.plan(&key, plan);
        self.produced.tasks.insert(key.clone(), (plan, 1));
        let count = self.rng.u32(1..4);
        self.produced.spawns.insert(key.clone(), count);
        let mut parent = workload::versioned(&key, 1);
        parent.task_data.insert("spawn".into(), count.into());
        let group = crate::groups::children_of(&parent);
        let mut children = BTreeMap::new();
        for i in 1..=count {
            let child = child_of(&key, u64::from(i));
            let plan = self.draw_plan();
            self.plan(&child, plan);
            self.produced.tasks.insert(child.clone(), (plan, 1));
            let member = GroupMember::new(group.id.clone(), i)
                .of(count)
                .joined_by(group.task_type.clone());
            self.produced.members.insert(child.clone(), member);
            self.produced.parents.insert(child.clone(), key.clone());
            children.insert(i, child);
        }
        self.produced
            .group_parents
            .insert(group.id.clone(), key.clone());
        self.produced.groups.insert(group.id, (children, false));
        self.append(Record::Task(parent));
    }

    /// Two to eight members of a new group, due within six seconds, the last carrying the total.
    pub(super) fn produce_group(&mut self) {
        let size = self.rng.u32(2..9);
        let fail_fast = self.rng.u32(0..3) == 0;
        let members = (1..=size)
            .map(|index| (index, index == size, None))
            .collect();
        self.produce_members(members, size, fail_fast);
    }

    /// A large group, one of two shapes (issue 30, defect 9). Either 33 to 100 members (more
    /// than one node of the completion tree, `FANOUT`) whose total only one or two of them carry,
    /// anywhere in the group: the others climb only through full nodes, and the first to record
    /// the total walks the last path. Or a fail-fast group of the largest total
    /// (`MAX_GROUP_NUMBER`) of which only a few of the highest numbers are produced, one of them
    /// failing for good: its join runs on that failure.
    pub(super) fn produce_large_group(&mut self) {
        use scheduler_client::wire::MAX_GROUP_NUMBER;
        if self.rng.bool() {
            let size = self.rng.u32(33..101);
            let carriers: BTreeSet<u32> = (0..self.rng.u32(1..3))
                .map(|_| self.rng.u32(1..=size))
                .collect();
            let members = (1..=size)
                .map(|index| (index, carriers.contains(&index), None))
                .collect();
            let fail_fast = self.rng.u32(0..4) == 0;
            self.produce_members(members, size, fail_fast);
        } else {
            let count = self.rng.u32(2..6);
            let failing = self.rng.u32(0..count);
            let members = (0..count)
                .map(|i| {
                    let plan = (i == failing).then_some(Plan::FailAlways);
                    (
                        MAX_GROUP_NUMBER - i * 3,
                        i == failing || self.rng.bool(),
                        plan,
                    )
                })
                .collect();
            self.produce_members(members, MAX_GROUP_NUMBER, true);
        }
    }

    /// A new group of `members` (number, whether it carries `total`, its plan: drawn if none),
    /// due within six seconds on drawn orderingIds.
    fn produce_members(
        &mut self,
        members: Vec<(u32, bool, Option<Plan>)>,
        total: u32,
        fail_fast: bool,
    ) {
        self.next_unique += 1;
        let id = format!("g{:06}", self.next_unique);
        let now = self.now();
        let mut keys = BTreeMap::new();
        for (index, carries_total, plan) in members {
            let ordering_id = format!("o{}", self.rng.usize(0..ORDERING_IDS));
            let at = now + TimeDelta::milliseconds(self.rng.i64(300..6_000));
            let plan = plan.unwrap_or_else(|| self.draw_plan());
            let key = self.new_key(&ordering_id, at);
            self.produced.sequence.insert(key.clone(), self.next_unique);
            self.plan(&key, plan);
            let mut member = GroupMember::new(id.clone(), index);
            if carries_total {
                member = member.of(total);
            }
            if fail_fast {
                member = member.fail_fast();
            }
            self.produced.members.insert(key.clone(), member.clone());
            self.append(Record::Task(workload::versioned(&key, 1).in_group(member)));
            self.produced.tasks.insert(key.clone(), (plan, 1));
            keys.insert(index, key);
        }
        // One join in eight gives up on its first call: a dead letter the operator may redrive.
        if self.rng.u32(0..8) == 0 {
            self.produced.failing_joins.insert(id.clone());
            (self.shared.failing_joins.lock())
                .unwrap_or_else(PoisonError::into_inner)
                .insert(id.clone());
        }
        self.produced.groups.insert(id, (keys, fail_fast));
    }

    /// The groups that cannot be joined: fail-fast groups of which only some members were
    /// produced, none of which ended failed or dropped (one whose failing member was cancelled
    /// before its call never finishes, nor is it joined). Every other group can be.
    fn unjoinable(&self) -> BTreeSet<String> {
        let failed: BTreeSet<TaskKey> = (self.store.statuses().into_iter())
            .filter(|(_, s)| matches!(s.status, TaskStatus::Failed | TaskStatus::Dropped))
            .map(|((_, k), _)| k)
            .collect();
        (self.produced.groups.iter())
            .filter(|(_, (members, _))| {
                let all_produced =
                    members.keys().last().copied() == u32::try_from(members.len()).ok();
                !all_produced && !members.values().any(|k| failed.contains(k))
            })
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Whether a member may end cancelled by its group: it fails fast and a member's plan fails.
    pub(super) fn cancelled_by_its_group(&self, key: &TaskKey) -> bool {
        self.produced.groups.values().any(|(keys, fail_fast)| {
            *fail_fast
                && keys.values().any(|k| k == key)
                && keys.values().any(|k| {
                    self.produced
                        .tasks
                        .get(k)
                        .is_some_and(|(plan, _)| plan.final_status() != TaskStatus::Completed)
                })
        })
    }

    /// Whether `key` is a sub-task whose parent was cancelled before it ran (so never spawned
    /// it): its parent has a final status, and it has none.
    pub(super) fn never_spawned(&self, key: &TaskKey, statuses: &BTreeSet<TaskKey>) -> bool {
        self.produced
            .parents
            .get(key)
            .is_some_and(|parent| statuses.contains(parent) && self.parent_cancelled(parent))
    }

    fn parent_cancelled(&self, parent: &TaskKey) -> bool {
        self.store
            .statuses()
            .iter()
            .any(|((_, k), s)| k == parent && s.status == TaskStatus::Cancelled)
    }

    /// Whether every group's join has its final status.
    pub(super) fn joins_done(&self, statuses: &BTreeSet<TaskKey>) -> bool {
        let unjoinable = self.unjoinable();
        self.produced.groups.iter().all(|(id, (members, _))| {
            if unjoinable.contains(id) {
                return members.values().all(|k| statuses.contains(k));
            }
            if let Some(parent) = self.produced.group_parents.get(id) {
                if self.parent_cancelled(parent) {
                    return true;
                }
            }
            self.produced
                .joins
                .get(id)
                .is_some_and(|keys| keys.iter().any(|k| statuses.contains(k)))
        })
    }

    /// Each group's join: one task (of all those enqueued, the first admitted by its identity),
    /// called at least once with success, given every member's final outcome (a fail-fast
    /// group's, from its failure on) and each completed member's result.
    pub(super) fn check_groups(
        &mut self,
        statuses: &BTreeMap<TaskKey, TaskStatus>,
        calls: &[Call],
    ) {
        let joins = self
            .shared
            .joins
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        // A cancelled parent spawned no sub-tasks: their group never forms.
        let cancelled_parents: BTreeSet<String> = (self.produced.group_parents.iter())
            .filter(|(_, parent)| self.parent_cancelled(parent))
            .map(|(id, _)| id.clone())
            .collect();
        let unjoinable = self.unjoinable();
        let cancellable_by_group: BTreeSet<TaskKey> = (self.produced.members.keys())
            .filter(|k| self.cancelled_by_its_group(k))
            .cloned()
            .collect();
        let v = &mut self.violations;
        for (id, (members, fail_fast)) in &self.produced.groups {
            if cancelled_parents.contains(id) {
                continue;
            }
            let join_key = crate::groups::join_uniqueness_key(scheduler_client::DEFAULT_TASK_TYPE);
            let called: BTreeSet<&TaskKey> = calls
                .iter()
                .map(|c| &c.key)
                .filter(|k| k.ordering_id == *id && k.uniqueness_key == join_key)
                .collect();
            if unjoinable.contains(id) {
                if !called.is_empty() {
                    v.push(format!(
                        "join: group {id}, which no member failed, was joined: {called:?}"
                    ));
                }
                continue;
            }
            // A join that gave up on purpose, and its redrive (if the operator made one).
            let failing = self.produced.failing_joins.contains(id);
            let redrives = (called.iter())
                .filter(|k| self.produced.redriven.contains_key(**k))
                .count();
            let expected = match failing {
                true => 1 + redrives,
                false => 1,
            };
            if called.len() != expected || (!failing && redrives > 0) {
                v.push(format!(
                    "join: group {id} had {} join tasks called: {called:?}",
                    called.len()
                ));
            }
            let given: Vec<&GroupOutcomeOf> =
                joins.iter().filter(|(k, _)| k.ordering_id == *id).collect();
            if given.is_empty() && !(failing && redrives == 0) {
                let stored = self.store.groups();
                let stored = stored.iter().find(|(k, _)| k.id == *id).map(|(_, g)| g);
                v.push(format!(
                    "join: group {id}'s join never succeeded (members {members:?}, stored: {stored:?}, enqueued: {:?})",
                    self.produced.joins.get(id)
                ));
            }
            for (_, group) in given {
                let failed_fast = *fail_fast && group.failed_by.is_some();
                if !failed_fast && group.members.len() != members.len() {
                    v.push(format!(
                        "join: group {id}'s join was given {} of its {} members: {group:?}",
                        group.members.len(),
                        members.len()
                    ));
                }
                for outcome in &group.members {
                    let Some(member_key) = members.get(&outcome.index) else {
                        v.push(format!(
                            "join: group {id} has an unknown member {}",
                            outcome.index
                        ));
                        continue;
                    };
                    // A member redriven from the dead letters finishes under its new key.
                    let redriven = self.produced.redriven.get(&outcome.key) == Some(member_key);
                    let key = if redriven { &outcome.key } else { member_key };
                    if outcome.key != *key {
                        v.push(format!(
                            "join: group {id}'s member {} has the key {}, not {key}",
                            outcome.index, outcome.key
                        ));
                    }
                    let last = statuses.get(key).copied();
                    // A cancel does not interrupt a call already running: the join may see the
                    // cancel that the call's outcome replaces, or the call's outcome where its
                    // tree stopped before replacing the cancel with its status.
                    let cancellable =
                        self.produced.cancelled.contains(key) || cancellable_by_group.contains(key);
                    let raced = cancellable
                        && (outcome.status == TaskStatus::Cancelled
                            || last == Some(TaskStatus::Cancelled));
                    if last != Some(outcome.status) && !raced {
                        v.push(format!(
                            "join: group {id}'s join saw member {} ({key}) as {:?}, its status is {last:?}",
                            outcome.index, outcome.status
                        ));
                    }
                    let expected = serde_json::json!({ "index": outcome.index });
                    if outcome.status == TaskStatus::Completed
                        && outcome.result.as_ref() != Some(&expected)
                    {
                        v.push(format!(
                            "join: group {id}'s member {} completed with result {:?}",
                            outcome.index, outcome.result
                        ));
                    }
                }
            }
        }
    }
}

type GroupOutcomeOf = (TaskKey, crate::handler::GroupOutcome);
