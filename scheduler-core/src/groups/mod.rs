//! Groups and their join (design.md "Groups"): a member with a final outcome records it in its
//! group (`group_members`) before its own final status, then climbs the group's completion tree
//! ([`completion`]) as far as it finds every member finished; whoever finds the whole group
//! finished enqueues the join, a task of the members' type keyed by the group so that however
//! many members find it finished (concurrently, or again after a crash), its `IfAbsent` identity
//! admits one join. A crash between the outcome and the member's status runs the member again,
//! which records the outcome and climbs again: the join is never lost.

pub(crate) mod completion;
mod hook;

pub(crate) use hook::GroupsHook;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use scheduler_client::{truncate_to_millis, GroupMember, OnConflict, Task, TaskData};

use crate::enqueue::Enqueuer;
use crate::handler::{GroupOutcome, JobSpec};
use crate::hooks::StepError;
use crate::store::{GroupKey, GroupState, MemberOutcome, ParentRecord, StatusRecord};
use completion::Climb;
pub(crate) use completion::GroupTables;

/// The uniqueness key of a group's join (its orderingId is the group's id): one join per group
/// and task type.
pub(crate) fn join_uniqueness_key(task_type: &str) -> String {
    format!("group-finished:{task_type}")
}

/// The group named by a join type and an id.
pub(crate) fn key_of(task_type: &str, group_id: &str) -> GroupKey {
    GroupKey {
        task_type: task_type.to_string(),
        id: group_id.to_string(),
    }
}

/// The group `member` (of `task`) belongs to: named by the type that joins it.
pub(crate) fn group_of(task: &Task, member: &GroupMember) -> GroupKey {
    key_of(
        member.join_type.as_ref().unwrap_or(&task.task_type),
        &member.id,
    )
}

/// The join of `group`, enqueued `now` by a member task of it. A group of sub-tasks is joined in
/// its parent's place: the join is the member of the parent's own group that the parent was
/// (so a parent counts as finished once its sub-tasks' join has run, at any depth).
fn join_task(
    member_task: &Task,
    group: &GroupKey,
    parent: Option<&Task>,
    now: DateTime<Utc>,
) -> Task {
    let mut join = Task::new(
        group.id.clone(),
        truncate_to_millis(now),
        join_uniqueness_key(&group.task_type),
        TaskData::new(),
    )
    .of_type(group.task_type.clone())
    .with_priority(member_task.priority)
    .on_conflict(OnConflict::IfAbsent);
    join.join_of = Some(group.id.clone());
    join.group = parent.and_then(|parent| parent.group.clone());
    join
}

/// The id of the group of `parent`'s sub-tasks: derived from its key (two 64-bit xxHashes, so
/// that it fits the group id limit whatever the key's length), the same on every run of it.
pub(crate) fn children_of(parent: &Task) -> GroupKey {
    let key = parent.key().to_string();
    let hash = |seed| twox_hash::XxHash64::oneshot(seed, key.as_bytes());
    key_of(
        &parent.task_type,
        &format!("children:{:016x}{:016x}", hash(0), hash(1)),
    )
}

/// An orderingId starting with `prefix` on `partition` of `partitions` (a suffix `~n` is tried
/// until one lands there: about `partitions` tries), so that a job's buckets reach every
/// partition, so every node.
pub(crate) fn ordering_id_on(prefix: &str, partition: u32, partitions: u32) -> String {
    let partitions = partitions.max(1);
    let target = i32::try_from(partition % partitions).unwrap_or(0);
    (0u32..)
        .map(|n| format!("{prefix}~{n}"))
        .find(|candidate| scheduler_client::partition_for(candidate, partitions) == target)
        .unwrap_or_else(|| prefix.to_string())
}

/// The buckets of `job`, started by `coordinator`: bucket `i` (from 1) on partition
/// `(i - 1) % partitions`, due at the coordinator's time (at once, and the same keys on a rerun).
pub(crate) fn job_buckets(coordinator: &Task, job: &JobSpec, partitions: u32) -> Vec<Task> {
    (0u32..)
        .zip(&job.buckets)
        .map(|(i, data)| {
            let prefix = format!("{}/b{}", job.id, i + 1);
            let ordering_id = ordering_id_on(&prefix, i, partitions);
            Task::new(
                ordering_id,
                coordinator.scheduled_time,
                "bucket",
                data.clone(),
            )
            .of_type(job.bucket_type.clone())
            .with_priority(coordinator.priority)
        })
        .collect()
}

/// `children` as the sub-tasks of `parent`: members of its children's group, numbered in the
/// order spawned, joined by the parent's handler.
pub(crate) fn as_children(parent: &Task, children: Vec<Task>) -> (GroupKey, Vec<Task>) {
    let group = children_of(parent);
    let total = u32::try_from(children.len()).unwrap_or(u32::MAX);
    let children = (1..=total)
        .zip(children)
        .map(|(index, child)| {
            let member = GroupMember::new(group.id.clone(), index)
                .of(total)
                .joined_by(parent.task_type.clone());
            child.in_group(member)
        })
        .collect();
    (group, children)
}

/// Records `outcome` of `task` (a member of `member`'s group) and, if that finishes the group,
/// enqueues its join. Returns whether it enqueued the join. Reads a few rows whatever the
/// group's size: its header, and the rows of the completion tree it climbs.
pub(crate) async fn member_finished(
    tables: GroupTables,
    enqueuer: Arc<dyn Enqueuer>,
    task: Task,
    member: GroupMember,
    outcome: MemberOutcome,
    now: DateTime<Utc>,
) -> Result<bool, StepError> {
    let group = group_of(&task, &member);
    let (index, failed_fast) = (outcome.index, member.fail_fast && outcome.is_failure());
    // Whether this member may be the first to record the total (see `completion`): none is
    // recorded, or its own row is (run again, after a failed try or a crash, it may have
    // recorded the total itself).
    let first_total = match member.total {
        Some(_) => {
            let header = tables.groups.group_header(group.clone()).await?;
            header.total.is_none()
                || !(tables
                    .groups
                    .finished_members(group.clone(), index, index)
                    .await?)
                    .is_empty()
        }
        None => false,
    };
    tables
        .groups
        .record_member(group.clone(), outcome, member.total, member.fail_fast)
        .await?;
    let total = match member.total {
        Some(total) => Some(total),
        None => tables.groups.group_header(group.clone()).await?.total,
    };
    let mut finished = failed_fast;
    if !finished {
        finished = completion::climb(&tables, &group, index, total).await? != Climb::NotYet;
    }
    if let (false, true, Some(total)) = (finished, first_total && total != Some(index), total) {
        finished = completion::climb(&tables, &group, total, Some(total)).await? != Climb::NotYet;
    }
    if !finished {
        return Ok(false);
    }
    let parent = tables.groups.group_parent(group.clone()).await?;
    let parent = parent.as_ref().map(|p| &p.task);
    enqueuer
        .enqueue(join_task(&task, &group, parent, now))
        .await?;
    Ok(true)
}

/// The outcome `task` records as `member` of its group, from its final `record`. A join of
/// sub-tasks records it in their parent's place (design.md "Sub-tasks"): by the parent's key,
/// with the result the parent's attempt set unless the join set one; the status, error and time
/// are the join's, as the parent counts as finished once its sub-tasks' join has.
pub(crate) fn member_outcome(
    member: &GroupMember,
    task: &Task,
    record: &StatusRecord,
    in_place_of: Option<ParentRecord>,
) -> MemberOutcome {
    let (key, parent_result) = match in_place_of {
        Some(parent) => (parent.task.key(), parent.result),
        None => (task.key(), None),
    };
    MemberOutcome {
        index: member.index,
        key,
        status: record.status,
        error: record.last_error.clone(),
        result: record.result.clone().or(parent_result),
        finished_at: record.updated_at,
    }
}

/// What a join's call is given: its group as stored now.
pub(crate) fn outcome_of(group: GroupKey, state: GroupState) -> GroupOutcome {
    GroupOutcome {
        group,
        total: state.total,
        failed_by: state.failed_by,
        members: state.members,
        parent: state.parent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Finishes member `index` of group `g` (knowing `total` if given), completed, on `store`;
    /// a join it enqueues goes to `outbox`.
    fn finish_member(
        runtime: &tokio::runtime::Runtime,
        store: &crate::store::memory::MemoryStore,
        outbox: &crate::enqueue::Outbox,
        index: u32,
        total: Option<u32>,
        now: DateTime<Utc>,
    ) -> Result<bool, StepError> {
        let mut member = GroupMember::new("g", index).joined_by("join");
        member.total = total;
        let task =
            Task::new(format!("m{index}"), now, "u", TaskData::new()).in_group(member.clone());
        let outcome = MemberOutcome {
            index,
            key: task.key(),
            status: crate::store::TaskStatus::Completed,
            error: None,
            result: None,
            finished_at: now,
        };
        let shared = GroupTables::from(&crate::store::Tables::of(&Arc::new(store.clone())));
        let enqueuer: Arc<dyn Enqueuer> = Arc::new(outbox.clone());
        runtime.block_on(member_finished(
            shared, enqueuer, task, member, outcome, now,
        ))
    }

    /// Finishes every member of a group of `total` (those listed in `without_total` not knowing
    /// the total) in a shuffled order; returns the member after whose finish each join was
    /// enqueued, and the group rows read per member.
    fn finish_group(total: u32, without_total: &[u32], seed: u64) -> (Vec<u32>, f64) {
        let store = crate::store::memory::MemoryStore::default();
        let outbox = crate::enqueue::Outbox::default();
        let mut order: Vec<u32> = (1..=total).collect();
        fastrand::Rng::with_seed(seed).shuffle(&mut order);
        let now = Utc::now();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let mut joined_after = Vec::new();
        for index in order {
            let total = (!without_total.contains(&index)).then_some(total);
            finish_member(&runtime, &store, &outbox, index, total, now).expect("recorded");
            joined_after.extend(outbox.take().iter().map(|_| index));
        }
        let per_member = store.group_rows_read() as f64 / f64::from(total);
        (joined_after, per_member)
    }

    #[test]
    fn a_groups_join_is_enqueued_once_its_last_member_finishes_reading_few_rows_each() {
        for (seed, total) in [(1, 1), (2, 31), (3, 32), (4, 33), (5, 1024), (6, 2000)] {
            let (joined_after, per_member) = finish_group(total, &[], seed);
            assert_eq!(
                joined_after.len(),
                1,
                "one join for {total}: {joined_after:?}"
            );
            // Rows read per member finishing: a bound, whatever the group's size (it was every
            // member finished so far: 1,000 on average for 2,000 members).
            assert!(
                per_member <= 40.0,
                "{per_member} rows read per member of {total}"
            );
        }
    }

    #[test]
    fn the_member_that_records_the_total_walks_the_last_path_again_when_run_again() {
        // 70 members, only member 5 carrying the total and finishing last: the last node
        // (65-70) is one the others could not finish. Member 5's first try fails after its
        // write (at its first mark); tried again, it finds the total recorded, by itself.
        let store = crate::store::memory::MemoryStore::default();
        let outbox = crate::enqueue::Outbox::default();
        let now = Utc::now();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let finish = |index: u32| {
            let total = (index == 5).then_some(70);
            finish_member(&runtime, &store, &outbox, index, total, now)
        };
        for index in (1..=70).filter(|i| *i != 5) {
            assert!(!finish(index).expect("recorded"), "member {index}");
        }
        store.fail_op("group mark write", 1);
        assert!(finish(5).is_err(), "the first try fails");
        assert!(
            finish(5).expect("recorded"),
            "tried again, it finds the group finished"
        );
        assert_eq!(outbox.take().len(), 1);
    }

    #[test]
    fn a_group_whose_total_only_some_members_carry_is_joined_once_all_finished() {
        // Only one member knows the total (the seed's n/N rule), finishing anywhere in the
        // order: the nodes the others could not finish are finished by its walk.
        for seed in 0..40u32 {
            let total = 70;
            let others: Vec<u32> = (1..=total).filter(|i| *i != 5 + seed).collect();
            let (joined_after, _) = finish_group(total, &others, u64::from(seed));
            assert_eq!(joined_after.len(), 1, "seed {seed}: {joined_after:?}");
        }
    }

    #[test]
    fn a_jobs_buckets_land_on_every_partition_in_turn() {
        let coordinator = Task::new("c", Utc::now(), "job", TaskData::new());
        let job = JobSpec {
            id: "nightly-2026-11-23".into(),
            bucket_type: "bucket".into(),
            buckets: vec![TaskData::new(); 64],
        };
        let buckets = job_buckets(&coordinator, &job, 6);
        let partitions: Vec<i32> = (buckets.iter())
            .map(|b| scheduler_client::partition_for(&b.ordering_id, 6))
            .collect();
        let expected: Vec<i32> = (0..64).map(|i| i % 6).collect();
        assert_eq!(partitions, expected);
        assert!(buckets[0].ordering_id.starts_with("nightly-2026-11-23/b1~"));
        // The same buckets when the coordinator runs again.
        assert_eq!(job_buckets(&coordinator, &job, 6), buckets);
    }

    #[test]
    fn sub_task_groups_are_named_by_their_parent_the_same_every_time() {
        let parent = Task::new(
            "p".repeat(1024),
            Utc::now(),
            "u".repeat(1024),
            TaskData::new(),
        );
        let group = children_of(&parent);
        assert_eq!(group, children_of(&parent.clone()));
        assert!(group.id.len() <= scheduler_client::wire::MAX_GROUP_ID_BYTES);
        let other = Task::new("p", parent.scheduled_time, "v", TaskData::new());
        assert_ne!(children_of(&other), group);
    }
}
