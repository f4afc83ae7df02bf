//! Groups (`group_members`, `group_marks`): one Cassandra partition per group (its task type and
//! id) in each. `group_members` holds a row per member that has a final outcome, and the
//! group's header as static columns (its total once a member carried it, whether it fails fast,
//! and the first member seen failing). `group_marks` holds the group's completion tree
//! (`groups/completion.rs`): a row per node of it whose members have all finished, with
//! how they finished. A member writes its outcome before its own final status, then reads the
//! few rows its place in the tree needs: whoever finishes the root (or a failure, for a
//! fail-fast group) enqueues the join, which alone reads every member.
//!
//! The whole table in one place: its rows and [`GroupStore`] (here), its statements and
//! implementation on Cassandra (`cassandra.rs`), its in-memory twin (`memory.rs`).

#[cfg(feature = "node")]
mod cassandra;
#[cfg(any(test, feature = "testing"))]
mod memory;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use scheduler_client::{Task, TaskKey};
use serde_json::Value;

use super::{StoreError, StoreResult, TaskStatus};

/// A member number or total as the group table stores it: a CQL `int`, which Cassandra refuses
/// past `i32::MAX` (the wire format's `u32` goes further; the client and the decoder refuse such
/// numbers, `scheduler_client::wire::MAX_GROUP_NUMBER`). Refused, not wrapped, by both stores.
pub(crate) fn stored_group_number(n: u32, operation: &'static str) -> StoreResult<i32> {
    i32::try_from(n).map_err(|_| {
        StoreError::refused(
            operation,
            format!("{n} is over the group table's limit of {}", i32::MAX),
        )
    })
}

/// A group: the task type of its members (whose handler runs its join) and its id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKey {
    /// The members' task type.
    pub task_type: String,
    /// The group's id.
    pub id: String,
}

impl std::fmt::Display for GroupKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.task_type, self.id)
    }
}

/// The final outcome of one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberOutcome {
    /// The member's number in its group, from 1.
    pub index: u32,
    /// The member task.
    pub key: TaskKey,
    /// Completed, failed, dropped, or cancelled.
    pub status: TaskStatus,
    /// The last attempt's error, for failed and dropped members (or why it was cancelled).
    pub error: Option<String>,
    /// The small JSON result its handler set, if any.
    pub result: Option<Value>,
    /// When the outcome was recorded.
    pub finished_at: DateTime<Utc>,
}

impl MemberOutcome {
    /// Whether this outcome fails a fail-fast group.
    pub fn is_failure(&self) -> bool {
        matches!(self.status, TaskStatus::Failed | TaskStatus::Dropped)
    }
}

/// The task whose sub-tasks a group holds, with the result its attempt set: written before the
/// sub-tasks are enqueued, so their join finds it and records the parent's own outcome in the
/// parent's place (its key, and this result unless the join set one).
#[derive(Debug, Clone, PartialEq)]
pub struct ParentRecord {
    /// The parent, whole.
    pub task: Task,
    /// The result its handler set (at most `MAX_RESULT_BYTES` of JSON), if any.
    pub result: Option<Value>,
}

/// A group's header: its partition's static columns, one row whatever the group's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupHeader {
    /// How many members the group has, once a member that knows it has finished.
    pub total: Option<u32>,
    /// Whether the group fails fast.
    pub fail_fast: bool,
    /// A failed member of a fail-fast group (the first one seen), which finishes the group.
    pub failed_by: Option<u32>,
}

/// How the members under a node of a group's completion tree finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupTally {
    /// Members completed.
    pub completed: u32,
    /// Members failed or dropped.
    pub failed: u32,
    /// Members cancelled.
    pub cancelled: u32,
    /// Items the members reported processed (their last progress reports, for a job's
    /// buckets: [`crate::TaskContext::report_progress`]).
    pub items: u64,
}

impl GroupTally {
    /// One member that finished with `status`.
    pub fn of(status: TaskStatus) -> GroupTally {
        let mut tally = GroupTally::default();
        match status {
            TaskStatus::Failed | TaskStatus::Dropped => tally.failed = 1,
            TaskStatus::Cancelled => tally.cancelled = 1,
            _ => tally.completed = 1,
        }
        tally
    }

    /// Members finished.
    pub fn finished(&self) -> u32 {
        self.completed
            .saturating_add(self.failed)
            .saturating_add(self.cancelled)
    }
}

impl std::ops::Add for GroupTally {
    type Output = GroupTally;

    fn add(self, other: GroupTally) -> GroupTally {
        GroupTally {
            completed: self.completed.saturating_add(other.completed),
            failed: self.failed.saturating_add(other.failed),
            cancelled: self.cancelled.saturating_add(other.cancelled),
            items: self.items.saturating_add(other.items),
        }
    }
}

/// A node of a group's completion tree whose members have all finished: node `node` of
/// `level` (from 1) covers members `node * FANOUT^level + 1` to `(node + 1) * FANOUT^level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupMark {
    /// The node's level, from 1 (its children are members at level 1).
    pub level: u8,
    /// The node's number in its level, from 0.
    pub node: u32,
    /// How the members under it finished.
    pub tally: GroupTally,
}

/// What the store knows of a group.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GroupState {
    /// How many members the group has, once a member that knows it has finished.
    pub total: Option<u32>,
    /// Whether the group fails fast.
    pub fail_fast: bool,
    /// A failed member of a fail-fast group (the first one seen), which finishes the group.
    pub failed_by: Option<u32>,
    /// The members with a final outcome, by number.
    pub members: Vec<MemberOutcome>,
    /// For a group of sub-tasks: the task that spawned them (its join inherits the parent's
    /// own place in a group).
    pub parent: Option<Task>,
}

impl GroupState {
    /// Whether the group is finished: every member has its outcome, or a member of a
    /// fail-fast group failed.
    pub fn is_finished(&self) -> bool {
        if self.failed_by.is_some() {
            return true;
        }
        match self.total {
            Some(total) => {
                let numbered = self.members.iter().filter(|m| m.index <= total).count();
                numbered >= total as usize
            }
            None => false,
        }
    }
}

/// The groups' members and headers.
pub trait GroupStore: Send + Sync + 'static {
    /// Records a member's outcome (again: the same member's row is overwritten), with the
    /// group's `total` if the member knows it, and whether the group fails fast; a failure of a
    /// fail-fast group also sets `failed_by` unless it is set.
    fn record_member(
        &self,
        group: GroupKey,
        outcome: MemberOutcome,
        total: Option<u32>,
        fail_fast: bool,
    ) -> BoxFuture<'static, StoreResult<()>>;

    /// The group, read at the level that sees every member's completed write, a page at a
    /// time; `None` when no member has finished. Every member: only a join reads it (and the
    /// admin API, for one group).
    fn group(&self, group: GroupKey) -> BoxFuture<'static, StoreResult<Option<GroupState>>>;

    /// The group's header (one row); the default when nothing is stored.
    fn group_header(&self, group: GroupKey) -> BoxFuture<'static, StoreResult<GroupHeader>>;

    /// The members numbered `first` to `last` that have finished, with their status: at most
    /// `last - first + 1` rows.
    fn finished_members(
        &self,
        group: GroupKey,
        first: u32,
        last: u32,
    ) -> BoxFuture<'static, StoreResult<Vec<(u32, TaskStatus)>>>;

    /// Records a node of the group's completion tree as finished (again: overwritten).
    fn record_group_mark(
        &self,
        group: GroupKey,
        mark: GroupMark,
    ) -> BoxFuture<'static, StoreResult<()>>;

    /// The finished nodes `first` to `last` of `level`: at most `last - first + 1` rows.
    fn group_marks(
        &self,
        group: GroupKey,
        level: u8,
        first: u32,
        last: u32,
    ) -> BoxFuture<'static, StoreResult<Vec<GroupMark>>>;

    /// Every finished node of the group's tree, by level and node, a page at a time: about one
    /// row per `FANOUT` (`store/group_marks.rs`) members (a job's progress in a list).
    fn all_group_marks(&self, group: GroupKey) -> BoxFuture<'static, StoreResult<Vec<GroupMark>>>;

    /// Records the task whose sub-tasks the group holds, and its result (again: overwritten).
    fn record_parent(
        &self,
        group: GroupKey,
        parent: ParentRecord,
    ) -> BoxFuture<'static, StoreResult<()>>;

    /// The task whose sub-tasks the group holds, with its result (the header only: one row);
    /// `None` for a group of no parent, or past retention.
    fn group_parent(
        &self,
        group: GroupKey,
    ) -> BoxFuture<'static, StoreResult<Option<ParentRecord>>>;
}
