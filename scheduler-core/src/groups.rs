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
use crate::executor::GroupOutcome;
use crate::store::{GroupKey, GroupState, MemberOutcome, StoreError, TaskStore};

/// The uniqueness key of a group's join (its orderingId is the group's id): one join per group
/// and task type.
pub(crate) fn join_uniqueness_key(task_type: &str) -> String {
    format!("group-finished:{task_type}")
}

/// The group of a member task.
pub(crate) fn key_of(task_type: &str, group_id: &str) -> GroupKey {
    GroupKey {
        task_type: task_type.to_string(),
        id: group_id.to_string(),
    }
}

/// The join of `member`'s group, enqueued `now` by a member task of it.
fn join_task(member_task: &Task, member: &GroupMember, now: DateTime<Utc>) -> Task {
    let mut join = Task::new(
        member.id.clone(),
        truncate_to_millis(now),
        join_uniqueness_key(&member_task.task_type),
        TaskData::new(),
    )
    .of_type(member_task.task_type.clone())
    .with_priority(member_task.priority)
    .on_conflict(OnConflict::IfAbsent);
    join.join_of = Some(member.id.clone());
    join
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
    let group = key_of(&task.task_type, &member.id);
    store
        .record_member(group.clone(), outcome, member.total, member.fail_fast)
        .await?;
    let finished = store
        .group(group)
        .await?
        .is_some_and(|state| state.is_finished());
    if finished {
        enqueuer.enqueue(join_task(&task, &member, now)).await?;
    }
    Ok(finished)
}

/// What a join's call is given: its group as stored now.
pub(crate) fn outcome_of(group: GroupKey, state: GroupState) -> GroupOutcome {
    GroupOutcome {
        group,
        total: state.total,
        failed_by: state.failed_by,
        members: state.members,
    }
}
