//! The task model: what a producer schedules and what the node runs.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

/// The user's payload: a JSON object, interpreted only by the user's executor.
pub type TaskData = Map<String, Value>;

/// Identifies a task. Two tasks with the same key are the same task: scheduling it again
/// overwrites the first, and once it completed it does not run again.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskKey {
    /// When the task is due. Field order matters: keys sort by time first, as in the schedule.
    pub scheduled_time: DateTime<Utc>,
    /// The ordering queue: tasks of one `ordering_id` run one at a time, in schedule order.
    pub ordering_id: String,
    /// Tells apart tasks of one `ordering_id` due at the same time.
    pub uniqueness_key: String,
}

impl std::fmt::Display for TaskKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{}/{}",
            self.ordering_id,
            self.scheduled_time
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            self.uniqueness_key
        )
    }
}

/// A task's identity apart from its time: what a conflict mode, a reschedule and a cancel by
/// identity name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskIdentity {
    /// The task's orderingId.
    pub ordering_id: String,
    /// The task's uniquenessKey.
    pub uniqueness_key: String,
}

impl TaskIdentity {
    /// The identity `(ordering_id, uniqueness_key)`.
    pub fn new(ordering_id: impl Into<String>, uniqueness_key: impl Into<String>) -> Self {
        TaskIdentity {
            ordering_id: ordering_id.into(),
            uniqueness_key: uniqueness_key.into(),
        }
    }
}

impl std::fmt::Display for TaskIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.ordering_id, self.uniqueness_key)
    }
}

/// What the node that owns a task's partition does when a task is scheduled while another of
/// the same identity (orderingId and uniquenessKey, whatever its time) is pending. Applied in
/// partition order, so concurrent producers cannot race. A task scheduled without one is keyed
/// by its time too, as always: it neither looks for nor leaves an identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnConflict {
    /// The new task takes the pending one's place, with its own time and data; the pending one
    /// never runs (unless it is already running).
    Replace,
    /// The new data, at the pending task's time.
    KeepTime,
    /// The new time and data, but never later than `max_wait` after the time of the first
    /// task of the pending chain: a burst of submissions runs once, after the last.
    Debounce {
        /// How far the first pending time may be pushed back.
        max_wait: std::time::Duration,
    },
    /// Ignored when a task of the identity is pending or finished within the status retention
    /// (a cancelled one does not count): submit-if-absent, a cluster-wide singleton.
    IfAbsent,
}

impl OnConflict {
    /// The wire format's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            OnConflict::Replace => "replace",
            OnConflict::KeepTime => "keepTime",
            OnConflict::Debounce { .. } => "debounce",
            OnConflict::IfAbsent => "ifAbsent",
        }
    }

    /// The mode named `name` (the wire format's spelling), with `max_wait` for `debounce`;
    /// `None` for another name, or `debounce` without a wait.
    pub fn from_parts(name: &str, max_wait: Option<std::time::Duration>) -> Option<OnConflict> {
        match name {
            "replace" => Some(OnConflict::Replace),
            "keepTime" => Some(OnConflict::KeepTime),
            "ifAbsent" => Some(OnConflict::IfAbsent),
            "debounce" => max_wait.map(|max_wait| OnConflict::Debounce { max_wait }),
            _ => None,
        }
    }

    /// The wait of `debounce`.
    pub fn max_wait(self) -> Option<std::time::Duration> {
        match self {
            OnConflict::Debounce { max_wait } => Some(max_wait),
            _ => None,
        }
    }
}

/// The order in which the tasks of one `ordering_id` run (see [`Task::run_order`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunOrder {
    /// When the task is due.
    pub scheduled_time: DateTime<Utc>,
    /// Its enqueue offset; -1 when unknown.
    pub enqueue_offset: i64,
    /// Its uniqueness key: the last tie-break.
    pub uniqueness_key: String,
}

impl RunOrder {
    /// The first run order after this one.
    pub fn successor(&self) -> RunOrder {
        let mut next = self.clone();
        next.uniqueness_key.push('\0');
        next
    }
}

/// A task's place in a group: a set of tasks (any orderingIds, any times) whose join, the
/// group-finished call of their task type's handler, runs once every member has a final outcome
/// (see design.md "Groups"). A group is named by its task type and `id`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GroupMember {
    /// The group's id, unique among the groups of the task type.
    pub id: String,
    /// This member's number in the group, from 1: a member submitted again with the same
    /// number is the same member (regenerating a group is idempotent).
    pub index: u32,
    /// How many members the group has, if this member knows: at least one member must carry it
    /// (when the total is not known up front, the last one submitted, as `total/total`).
    pub total: Option<u32>,
    /// The first member that fails (retries exhausted, or invalid) cancels the members that
    /// have not run yet and triggers the join at once.
    pub fail_fast: bool,
    /// The task type whose handler runs the group's join, if not the member's own (a parent's
    /// sub-tasks are joined by the parent's handler). The group is named by this type and `id`.
    pub join_type: Option<String>,
}

impl GroupMember {
    /// Member `index` (from 1) of group `id`, the total not known by this member.
    pub fn new(id: impl Into<String>, index: u32) -> GroupMember {
        GroupMember {
            id: id.into(),
            index,
            total: None,
            fail_fast: false,
            join_type: None,
        }
    }

    /// The member, knowing that the group has `total` members.
    pub fn of(mut self, total: u32) -> GroupMember {
        self.total = Some(total);
        self
    }

    /// The member of a group that fails fast.
    pub fn fail_fast(mut self) -> GroupMember {
        self.fail_fast = true;
        self
    }

    /// The member of a group joined by the handler of `task_type`.
    pub fn joined_by(mut self, task_type: impl Into<String>) -> GroupMember {
        self.join_type = Some(task_type.into());
        self
    }
}

/// The task type of a task that names none: what every record written before task types had.
pub const DEFAULT_TASK_TYPE: &str = "default";

/// A unit of work to run at `scheduled_time`.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    /// The ordering queue the task belongs to; also the Kafka key that picks its partition.
    pub ordering_id: String,
    /// When the task is due (millisecond precision on the wire and in storage).
    pub scheduled_time: DateTime<Utc>,
    /// Tells apart tasks of one `ordering_id` due at the same time.
    pub uniqueness_key: String,
    /// The user's payload.
    pub task_data: TaskData,
    /// Which handler runs the task ([`DEFAULT_TASK_TYPE`] unless set with [`Task::of_type`]).
    pub task_type: String,
    /// When due tasks wait for an executor slot, higher priorities go first (default 0) among
    /// the tasks of one limit key (keys take turns; tasks without one are one key). It never
    /// reorders the tasks of one `ordering_id`: they run one at a time, in schedule order.
    pub priority: i32,
    /// What to do if a task of the same identity is pending (see [`OnConflict`]); `None`:
    /// the task is keyed by its time too.
    pub on_conflict: Option<OnConflict>,
    /// Where the task was enqueued: the Kafka offset of the record that scheduled it, set by
    /// the node that consumed it (`None` on the producer's side, where it is not sent). Tasks
    /// of one `ordering_id` due at the same time run in this order.
    pub enqueue_offset: Option<i64>,
    /// The group the task belongs to, if any (see [`GroupMember`]).
    pub group: Option<GroupMember>,
    /// Set on a group's join task (created by the engine): the id of the group of the task's
    /// type that finished. Its handler's `group_finished` runs instead of `execute`.
    pub join_of: Option<String>,
    /// The W3C `traceparent` of the operation that scheduled the task: sent as the record's
    /// header (by default the current OpenTelemetry span's, see [`crate::trace`]), kept with the
    /// task by the node, and linked from the span of its execution.
    pub trace_parent: Option<String>,
    /// The key the task's per-key limits count it under (a tenant, an upstream API), set with
    /// [`Task::with_limit_key`]; independent of `ordering_id`, which still decides its partition
    /// and its order. `None`: no per-key limit applies to it.
    pub limit_key: Option<String>,
}

impl Task {
    /// A task; `scheduled_time` is truncated to whole milliseconds, the precision it is stored at.
    pub fn new(
        ordering_id: impl Into<String>,
        scheduled_time: DateTime<Utc>,
        uniqueness_key: impl Into<String>,
        task_data: TaskData,
    ) -> Task {
        Task {
            ordering_id: ordering_id.into(),
            scheduled_time: truncate_to_millis(scheduled_time),
            uniqueness_key: uniqueness_key.into(),
            task_data,
            task_type: DEFAULT_TASK_TYPE.to_string(),
            priority: 0,
            on_conflict: None,
            enqueue_offset: None,
            group: None,
            join_of: None,
            trace_parent: None,
            limit_key: None,
        }
    }

    /// The task with its type: the handler registered for `task_type` runs it.
    pub fn of_type(mut self, task_type: impl Into<String>) -> Task {
        self.task_type = task_type.into();
        self
    }

    /// The task with a conflict mode for a pending task of its identity.
    pub fn on_conflict(mut self, mode: OnConflict) -> Task {
        self.on_conflict = Some(mode);
        self
    }

    /// The task as a member of a group.
    pub fn in_group(mut self, member: GroupMember) -> Task {
        self.group = Some(member);
        self
    }

    /// The task's identity apart from its time.
    pub fn identity(&self) -> TaskIdentity {
        TaskIdentity::new(self.ordering_id.clone(), self.uniqueness_key.clone())
    }

    /// The task with a priority among due tasks waiting for a slot (higher first).
    pub fn with_priority(mut self, priority: i32) -> Task {
        self.priority = priority;
        self
    }

    /// The task counted under `limit_key` by per-key limits (1 to
    /// [`MAX_LIMIT_KEY_BYTES`](crate::wire::MAX_LIMIT_KEY_BYTES) bytes).
    pub fn with_limit_key(mut self, limit_key: impl Into<String>) -> Task {
        self.limit_key = Some(limit_key.into());
        self
    }

    /// The task with the trace context to send with it (a W3C `traceparent`), instead of the
    /// current span's.
    pub fn with_trace_parent(mut self, trace_parent: impl Into<String>) -> Task {
        self.trace_parent = Some(trace_parent.into());
        self
    }

    /// The task as enqueued at `offset` of its partition.
    pub fn enqueued_at(mut self, offset: i64) -> Task {
        self.enqueue_offset = Some(offset);
        self
    }

    /// Where the task stands among the tasks of its `ordering_id`: by time, then by enqueue
    /// order, then (for tasks stored before enqueue offsets were) by uniqueness key.
    pub fn run_order(&self) -> RunOrder {
        RunOrder {
            scheduled_time: self.scheduled_time,
            enqueue_offset: self.enqueue_offset.unwrap_or(-1),
            uniqueness_key: self.uniqueness_key.clone(),
        }
    }

    /// The key that identifies this task.
    pub fn key(&self) -> TaskKey {
        TaskKey {
            scheduled_time: self.scheduled_time,
            ordering_id: self.ordering_id.clone(),
            uniqueness_key: self.uniqueness_key.clone(),
        }
    }
}

/// `time` without its sub-millisecond part.
pub fn truncate_to_millis(time: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(time.timestamp_millis()).unwrap_or(time)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn keys_order_by_time_then_ordering_id_then_uniqueness_key() {
        let t = |s| Utc.timestamp_opt(s, 0).single().unwrap();
        let mut keys = [
            Task::new("b", t(2), "x", Map::new()).key(),
            Task::new("a", t(2), "y", Map::new()).key(),
            Task::new("z", t(1), "z", Map::new()).key(),
            Task::new("a", t(2), "x", Map::new()).key(),
        ];
        keys.sort();
        let order: Vec<_> = keys
            .iter()
            .map(|k| (k.ordering_id.as_str(), k.uniqueness_key.as_str()))
            .collect();
        assert_eq!(order, [("z", "z"), ("a", "x"), ("a", "y"), ("b", "x")]);
    }

    #[test]
    fn scheduled_time_is_kept_to_the_millisecond() {
        let precise = Utc
            .timestamp_opt(1_800_000_000, 123_456_789)
            .single()
            .unwrap();
        let task = Task::new("o", precise, "u", Map::new());
        assert_eq!(task.scheduled_time.timestamp_subsec_nanos(), 123_000_000);
    }
}
