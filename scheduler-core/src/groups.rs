//! Groups and their join (design.md "Groups"): a member with a final outcome records it in its
//! group (`group_members`) before its own final status, then reads the group; whoever finds it
//! finished enqueues the join, a task of the members' type keyed by the group so that however
//! many members find it finished (concurrently, or again after a crash), its `IfAbsent` identity
//! admits one join. A crash between the outcome and the member's status runs the member again,
//! which records the outcome and triggers again: the join is never lost.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use scheduler_client::{truncate_to_millis, GroupMember, OnConflict, Task, TaskData};

use crate::enqueue::{EnqueueError, Enqueuer};
use crate::executor::{GroupOutcome, JobSpec};
use crate::store::{
    GroupKey, GroupState, MemberOutcome, ParentRecord, StatusRecord, StoreError, TaskStore,
};

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
fn join_task(member_task: &Task, group: &GroupKey, state: &GroupState, now: DateTime<Utc>) -> Task {
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
    join.group = state
        .parent
        .as_ref()
        .and_then(|parent| parent.group.clone());
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

/// A group step failed: the store or the producer; the caller retries the whole step (every
/// part of it is idempotent).
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum GroupStepError {
    /// Writing the outcome or reading the group failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Enqueueing the join failed.
    #[error(transparent)]
    Enqueue(#[from] EnqueueError),
}

/// Records `outcome` of `task` (a member of `member`'s group) and, if that finishes the group,
/// enqueues its join. Returns whether it enqueued the join.
pub(crate) async fn member_finished(
    store: Arc<dyn TaskStore>,
    enqueuer: Arc<dyn Enqueuer>,
    task: Task,
    member: GroupMember,
    outcome: MemberOutcome,
    now: DateTime<Utc>,
) -> Result<bool, GroupStepError> {
    let group = group_of(&task, &member);
    store
        .record_member(group.clone(), outcome, member.total, member.fail_fast)
        .await?;
    let state = store.group(group.clone()).await?;
    let Some(state) = state.filter(GroupState::is_finished) else {
        return Ok(false);
    };
    enqueuer
        .enqueue(join_task(&task, &group, &state, now))
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
