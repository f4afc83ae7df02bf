//! Groups (`group_members`): one Cassandra partition per group (its task type and id), a row per
//! member that has a final outcome, and the group's header as static columns (its total once a
//! member carried it, whether it fails fast, and the first member seen failing). A member writes
//! its outcome before its own final status, then reads the group: the reader that finds every
//! member finished (or a failure, for a fail-fast group) enqueues the join.

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use scheduler_client::{Task, TaskKey};
use serde_json::Value;

use super::{StoreError, StoreResult, TaskStatus};

/// A member number or total as the group table stores it: a CQL `int`, which Cassandra refuses
/// past `i32::MAX` (the wire format's `u32` goes further; the client and the decoder refuse such
/// numbers, `scheduler_client::wire::MAX_GROUP_NUMBER`). Refused, not wrapped, by both stores.
pub(crate) fn stored_group_number(n: u32, operation: &'static str) -> StoreResult<i32> {
    i32::try_from(n).map_err(|_| StoreError::Refused {
        operation,
        reason: format!("{n} is over the group table's limit of {}", i32::MAX),
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

    /// The group, read at the level that sees every member's completed write; `None` when no
    /// member has finished.
    fn group(&self, group: GroupKey) -> BoxFuture<'static, StoreResult<Option<GroupState>>>;

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

    /// The failed member of a fail-fast group, if one failed (the header only: a member about to
    /// run checks it).
    fn group_failed_by(&self, group: GroupKey) -> BoxFuture<'static, StoreResult<Option<u32>>>;
}
