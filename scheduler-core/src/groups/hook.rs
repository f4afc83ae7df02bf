//! Groups, sub-tasks and jobs attached to a task's life ([`crate::hooks`]): before the call, a
//! member of a fail-fast group that failed is cancelled, a join is given its group and a member
//! where its progress goes; at the final record, a completed call's sub-tasks (or a job's
//! buckets) are enqueued, or else a member's outcome is recorded in its group (which may
//! enqueue the join), before its own status.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use scheduler_client::{GroupMember, Task};
use tracing::debug;

use super::{
    as_children, group_of, job_buckets, key_of, member_finished, member_outcome, outcome_of,
    GroupTables,
};
use crate::clock::Clock;
use crate::enqueue::Enqueuer;
use crate::handler::{OutputSlot, ProgressReporter, TaskContext};
use crate::hooks::{self, BeforeCall, Halt, Steps, TaskHook};
use crate::store::{JobRecord, ParentRecord, StatusRecord, TaskStatus};

/// The groups feature of a partition tree.
pub(crate) struct GroupsHook {
    /// The groups' and jobs' tables.
    pub(crate) tables: GroupTables,
    /// Enqueues joins and sub-tasks.
    pub(crate) enqueuer: Arc<dyn Enqueuer>,
    pub(crate) clock: Arc<dyn Clock>,
    /// How many partitions the topic has (a job spreads its buckets over all of them).
    pub(crate) partitions: u32,
}

impl TaskHook for GroupsHook {
    fn before_call<'a>(
        &'a self,
        steps: &'a mut dyn Steps,
        task: &'a Task,
        context: &'a mut TaskContext,
    ) -> BoxFuture<'a, Result<BeforeCall, Halt>> {
        Box::pin(async move {
            if let Some(failed_by) = self.failed_by(steps, task).await? {
                debug!(partition = steps.partition(), task = %steps.key(), failed_by,
                    "cancelled by its fail-fast group");
                return Ok(BeforeCall::Finish {
                    status: TaskStatus::Cancelled,
                    reason: format!("its group failed fast: member {failed_by} failed"),
                });
            }
            // A join is called with its group as stored now (every member's outcome is there:
            // each was written before the read that triggered the join); empty if nothing was
            // stored, e.g. past retention.
            if let Some(id) = task.join_of.as_ref() {
                let (store, group) = (&self.tables.groups, key_of(&task.task_type, id));
                let state = hooks::read(steps, "group read", || store.group(group.clone())).await?;
                let outcome = outcome_of(group, state.unwrap_or_default());
                context.set_group(Arc::new(outcome));
            }
            if let Some(member) = &task.group {
                context.set_progress(Arc::new(ProgressReporter {
                    store: self.tables.jobs.clone(),
                    clock: self.clock.clone(),
                    group: group_of(task, member),
                    member: member.index,
                }));
            }
            Ok(BeforeCall::Call)
        })
    }

    fn at_final_record<'a>(
        &'a self,
        steps: &'a mut dyn Steps,
        task: &'a Task,
        record: &'a StatusRecord,
        output: Option<&'a OutputSlot>,
    ) -> BoxFuture<'a, Result<(), Halt>> {
        Box::pin(async move {
            if let (TaskStatus::Completed, Some(output)) = (record.status, output) {
                let job = output.take_job();
                let children = match &job {
                    Some(job) => job_buckets(task, job, self.partitions),
                    None => output.take_spawned(),
                };
                if !children.is_empty() {
                    let job = job.map(|job| job.id);
                    // Its own place in a group is taken by its sub-tasks' join.
                    return self.spawn(steps, task, children, job, record).await;
                }
            }
            self.record_in_group(steps, task, record).await
        })
    }

    /// A member found cancelled, failed or dropped records that in its group (recording it
    /// again is harmless): a cancel applied before the task was in the schedule had no row to
    /// learn its group from, and a failure's outcome may have been cut off between its dead
    /// letter and its group. (Not a completed one: a task that spawned sub-tasks is recorded
    /// by their join.)
    fn found_final<'a>(
        &'a self,
        steps: &'a mut dyn Steps,
        task: &'a Task,
        record: &'a StatusRecord,
    ) -> BoxFuture<'a, Result<(), Halt>> {
        Box::pin(async move {
            if record.status == TaskStatus::Completed {
                return Ok(());
            }
            self.record_in_group(steps, task, record).await
        })
    }
}

impl GroupsHook {
    /// For a member of a fail-fast group: the member whose failure finished the group, unless
    /// it is this one (run again after a crash, it runs on).
    async fn failed_by(&self, steps: &mut dyn Steps, task: &Task) -> Result<Option<u32>, Halt> {
        let Some(member) = task.group.as_ref().filter(|m| m.fail_fast) else {
            return Ok(None);
        };
        let (store, group) = (&self.tables.groups, group_of(task, member));
        let header = hooks::read(steps, "group read", || store.group_header(group.clone())).await?;
        Ok(header.failed_by.filter(|by| *by != member.index))
    }

    /// A successful attempt's sub-tasks, as owner, before the task's status: the group of its
    /// sub-tasks records the task as their parent, with the result its attempt set (their join
    /// takes its place in its own group, with that result), then each is enqueued. A crash
    /// before the status runs the task again, which spawns the same sub-tasks again.
    async fn spawn(
        &self,
        steps: &mut dyn Steps,
        task: &Task,
        children: Vec<Task>,
        job: Option<String>,
        record: &StatusRecord,
    ) -> Result<(), Halt> {
        let (group, children) = as_children(task, children);
        let (groups, jobs) = (&self.tables.groups, &self.tables.jobs);
        let parent = ParentRecord {
            task: task.clone(),
            result: record.result.clone(),
        };
        hooks::write(steps, "sub-task group write", || {
            groups.record_parent(group.clone(), parent.clone())
        })
        .await?;
        if let Some(id) = job {
            let record = JobRecord {
                id,
                coordinator: steps.key().clone(),
                group: group.clone(),
                buckets: u32::try_from(children.len()).unwrap_or(u32::MAX),
                started_at: self.clock.now(),
            };
            hooks::write(steps, "job write", || jobs.record_job(record.clone())).await?;
        }
        let enqueuer = &self.enqueuer;
        hooks::write(steps, "sub-task enqueue", || {
            let enqueues = children
                .iter()
                .cloned()
                .map(|child| enqueuer.enqueue(child));
            futures::stream::iter(enqueues)
                .buffer_unordered(crate::store::WRITE_CONCURRENCY)
                .try_collect::<Vec<()>>()
        })
        .await?;
        debug!(partition = steps.partition(), task = %steps.key(), sub_tasks = children.len(),
            group = %group, "sub-tasks enqueued");
        Ok(())
    }

    /// For a member of a group, as owner: records its final outcome in the group and enqueues
    /// the join if that finishes the group (before the member's own status, so a member with a
    /// final status always has its outcome in the group; a crash in between runs it again).
    async fn record_in_group(
        &self,
        steps: &mut dyn Steps,
        task: &Task,
        record: &StatusRecord,
    ) -> Result<(), Halt> {
        let Some(member) = task.group.clone() else {
            return Ok(());
        };
        let in_place_of = self.joined_parent(steps, task, &member).await?;
        let outcome = member_outcome(&member, task, record, in_place_of);
        let (tables, enqueuer, now) = (&self.tables, &self.enqueuer, record.updated_at);
        let joined = hooks::write(steps, "group outcome", || {
            let (tables, enqueuer) = (tables.clone(), enqueuer.clone());
            member_finished(
                tables,
                enqueuer,
                task.clone(),
                member.clone(),
                outcome.clone(),
                now,
            )
        })
        .await?;
        debug!(partition = steps.partition(), task = %steps.key(), group = %member.id,
            index = member.index, joined, "outcome recorded in its group");
        Ok(())
    }

    /// For a join of sub-tasks that took their parent's place in a group: the parent, with the
    /// result its attempt set (both recorded before the sub-tasks were enqueued); `None` for any
    /// other task, or a group past retention (the join then records its own key).
    async fn joined_parent(
        &self,
        steps: &mut dyn Steps,
        task: &Task,
        member: &GroupMember,
    ) -> Result<Option<ParentRecord>, Halt> {
        let Some(id) = task.join_of.as_ref() else {
            return Ok(None);
        };
        let (store, group) = (&self.tables.groups, key_of(&task.task_type, id));
        let parent = hooks::read(steps, "group parent read", || {
            store.group_parent(group.clone())
        })
        .await?;
        // (The join carries the membership it took from this parent.)
        Ok(parent.filter(|parent| parent.task.group.as_ref() == Some(member)))
    }
}
