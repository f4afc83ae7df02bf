//! The admin HTTP API's requests and answers, shared by the node (which serializes them) and the
//! `scheduler` command (which deserializes them), so the two cannot drift apart.
//!
//! Field names are camelCase on the wire. Times are strings in the wire format's RFC 3339 form
//! (UTC, milliseconds: `2026-11-22T06:00:00.000Z`). Statuses and outcomes are strings, so a
//! command older than the node still reads an answer carrying a status it does not know.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::store::PartitionId;

/// Every error answer: `{"error": "..."}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorResponse {
    /// What went wrong, for a person.
    pub error: String,
}

/// `GET /api/v1/ready`: 200 when ready, else 503, with the same body.
///
/// Fields are in alphabetical order: the answer was first built as a `serde_json::Value`, whose
/// keys are sorted, and stays byte-for-byte what it was.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReadyResponse {
    /// Partitions the node owns now.
    pub owned_partitions: Vec<PartitionId>,
    /// Whether the node owns partitions and has loaded each one's schedule.
    pub ready: bool,
}

/// `GET /api/v1/status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusResponse {
    /// The node's id (its Kafka client id).
    pub node_id: String,
    /// The node's version.
    pub version: String,
    /// The scheduler's topic.
    pub topic: String,
    /// The topic's partition count.
    pub partition_count: u32,
    /// Partitions the node owns now.
    pub owned_partitions: Vec<PartitionId>,
    /// One entry per owned partition.
    pub partitions: Vec<PartitionStatus>,
    /// The task types this node has a handler for.
    #[serde(default)]
    pub handlers: Vec<String>,
    /// Whether a handler of this node runs every other type too.
    #[serde(default)]
    pub handles_every_type: bool,
    /// Due tasks waiting because this node has no handler for their type, by type.
    #[serde(default)]
    pub waiting_for_handler: std::collections::BTreeMap<String, i64>,
    /// The queue this answer is of (`default` unless under `/queues/<name>/`; absent from
    /// nodes before queues, and left out when empty so their answer prints as it was).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub queue: String,
    /// Every queue the node serves; the first is the one at the API's root.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queues: Vec<QueueView>,
}

/// A queue the node serves, in [`StatusResponse`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueView {
    /// The queue's name.
    pub name: String,
    /// Its topic.
    pub topic: String,
    /// Its consumer group.
    pub group_id: String,
    /// The task types it carries (empty: the default queue, every type no queue lists).
    pub task_types: Vec<String>,
    /// Where its API is (`/queues/<name>`).
    pub path: String,
}

/// One owned partition in [`StatusResponse`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PartitionStatus {
    /// The partition.
    pub partition: PartitionId,
    /// Tasks in memory waiting for their time.
    pub tasks_scheduled: usize,
    /// Tasks in memory that are due: queued or running.
    pub tasks_executing: usize,
    /// Consumer lag, from the Kafka client's statistics (every 5 s); null until known.
    pub kafka_lag: Option<i64>,
}

/// `GET /api/v1/partitions`: every partition of the queue's topic and the node that claimed it
/// last (its owner until another node claims it), from the store's ownership table, so any
/// node answers for the whole cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PartitionsResponse {
    /// The node answering.
    pub node_id: String,
    /// Every partition, in order.
    pub partitions: Vec<PartitionOwnerView>,
}

/// One partition in [`PartitionsResponse`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PartitionOwnerView {
    /// The partition.
    pub partition: PartitionId,
    /// The node that claimed it last; null if no node ever did.
    pub owner: Option<String>,
    /// The ownership epoch of that claim (each claim raises it; 0: never claimed).
    pub epoch: u64,
    /// When it was claimed.
    pub claimed_at: Option<String>,
    /// Whether the node answering runs the partition now. A partition the node just lost or
    /// just got may name it as owner, or not, for the moment of a rebalance.
    pub owned_here: bool,
}

/// `GET /api/v1/task`'s query. The key's parts are optional here so that a missing one is
/// answered with its name ("orderingId is required"), not a generic parse error.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskQuery {
    /// The task's orderingId.
    pub ordering_id: Option<String>,
    /// The task's scheduled time, RFC 3339.
    pub scheduled_time: Option<String>,
    /// The task's uniquenessKey.
    pub uniqueness_key: Option<String>,
    /// How many attempts to return, newest first (default 20, at most 100).
    pub history: Option<usize>,
}

/// `GET /api/v1/task`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskResponse {
    /// The task's orderingId.
    pub ordering_id: String,
    /// The task's scheduled time.
    pub scheduled_time: String,
    /// The task's uniquenessKey.
    pub uniqueness_key: String,
    /// The partition the task belongs to.
    pub partition: PartitionId,
    /// pending, completed, failed, dropped or cancelled.
    pub status: String,
    /// Attempts made so far.
    pub attempts: u32,
    /// The last attempt's error, for failed and dropped tasks.
    pub last_error: Option<String>,
    /// When the final status was recorded.
    pub updated_at: Option<String>,
    /// Present while the task is in the schedule (it leaves it once finished).
    pub task_data: Option<Value>,
    /// The last attempts, newest first.
    pub history: Vec<AttemptView>,
}

/// One attempt in [`TaskResponse::history`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttemptView {
    /// The attempt's number, from 1.
    pub attempt: u32,
    /// When the executor was called (for an attempt that ended its task on the first try, which
    /// is recorded by the task's status alone, from the status: null in statuses written before
    /// schema version 14).
    pub started_at: Option<String>,
    /// When it returned.
    pub finished_at: String,
    /// How long the call took, in milliseconds (null without its start).
    #[serde(default)]
    pub duration_ms: Option<i64>,
    /// succeeded, failed or invalid.
    pub outcome: String,
    /// The executor's error, if it failed.
    pub error: Option<String>,
}

/// `POST /api/v1/task/cancel`'s body: the task's key. Optional parts, as in [`TaskQuery`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskKeyBody {
    /// The task's orderingId.
    pub ordering_id: Option<String>,
    /// The task's scheduled time, RFC 3339.
    pub scheduled_time: Option<String>,
    /// The task's uniquenessKey.
    pub uniqueness_key: Option<String>,
}

/// `POST /api/v1/task/cancel`'s answer (202).
///
/// Fields are in alphabetical order, as in [`ReadyResponse`] and for the same reason.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CancelResponse {
    /// What the cancellation does and does not do.
    pub note: String,
    /// The task's partition.
    pub partition: PartitionId,
    /// "cancellation enqueued".
    pub result: String,
    /// The task's key, `orderingId/scheduledTime/uniquenessKey`.
    pub task: String,
}

/// `GET /api/v1/tasks`'s query: a window, a page size, and the key a page resumes after.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListQuery {
    /// Start of the window (RFC 3339, inclusive); on a later page, the time of the key it
    /// resumes after.
    pub from: Option<String>,
    /// End of the window (RFC 3339, exclusive).
    pub to: Option<String>,
    /// Tasks per page, 1..1000 (default 100).
    pub limit: Option<usize>,
    /// With `from_uniqueness_key`, the key the previous page ended at.
    pub from_ordering_id: Option<String>,
    /// With `from_ordering_id`, the key the previous page ended at.
    pub from_uniqueness_key: Option<String>,
    /// Only tasks of this type.
    pub task_type: Option<String>,
    /// Only this orderingId's tasks: only its partition is read (its rows of the window, up to
    /// `limit` a page, others' included), so a page may hold few of them: follow `next`.
    pub ordering_id: Option<String>,
    /// Only tasks in this state (see [`ListedTask::state`]).
    pub state: Option<PendingState>,
    /// Whether the engine's own tasks (a recurring schedule's ticks, `scheduler:tick`) are
    /// listed too (default false).
    pub include_internal: Option<bool>,
}

/// Where a pending task stands (this node's view: a retry or a limit of a task another node
/// runs is not seen here, and it shows as `overdue`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PendingState {
    /// Not due yet.
    Waiting,
    /// Due, not run yet (behind its orderingId's earlier tasks, waiting for a slot, or run by
    /// another node).
    Overdue,
    /// An attempt failed; the next is due at `retry.nextAttemptAt`.
    Retrying,
    /// Held by a suspension of its orderingId, type or group (`suspendedBy`).
    Suspended,
    /// Held at its limit key's concurrency or rate limit (on this node).
    Limited,
}

impl PendingState {
    /// Every state, in the order a task goes through them.
    pub const ALL: [PendingState; 5] = [
        PendingState::Waiting,
        PendingState::Overdue,
        PendingState::Retrying,
        PendingState::Suspended,
        PendingState::Limited,
    ];

    /// The state as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            PendingState::Waiting => "waiting",
            PendingState::Overdue => "overdue",
            PendingState::Retrying => "retrying",
            PendingState::Suspended => "suspended",
            PendingState::Limited => "limited",
        }
    }
}

/// `GET /api/v1/tasks`'s answer: a page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListResponse {
    /// The page's tasks, in task-key order.
    pub tasks: Vec<ListedTask>,
    /// Query parameters for the next page (with the same `to` and `limit`), or null at the end.
    pub next: Option<PageCursor>,
}

/// One task in [`ListResponse`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListedTask {
    /// The task's orderingId.
    pub ordering_id: String,
    /// The task's scheduled time.
    pub scheduled_time: String,
    /// The task's uniquenessKey.
    pub uniqueness_key: String,
    /// The partition the task belongs to.
    pub partition: PartitionId,
    /// The task's type.
    pub task_type: String,
    /// Where it stands.
    pub state: PendingState,
    /// Its retry, when it is retrying.
    pub retry: Option<RetryView>,
    /// What suspends it (`kind:target`), when it is suspended.
    pub suspended_by: Option<String>,
    /// The task's data.
    pub task_data: Value,
}

/// A task's planned retry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryView {
    /// The attempts made so far.
    pub attempts: u32,
    /// When the next attempt is due.
    pub next_attempt_at: String,
    /// Why the last attempt failed (its first KiB).
    pub error: Option<String>,
}

/// `GET /api/v1/tasks/retrying`'s answer: the tasks this node runs that wait for their next
/// attempt, the soonest due first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryingResponse {
    /// At most 1,000, the soonest due first.
    pub tasks: Vec<RetryingTask>,
    /// How many wait for a retry on this node.
    pub total: usize,
}

/// One task of [`RetryingResponse`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryingTask {
    /// The task's orderingId.
    pub ordering_id: String,
    /// The task's scheduled time.
    pub scheduled_time: String,
    /// The task's uniquenessKey.
    pub uniqueness_key: String,
    /// The task's partition.
    pub partition: PartitionId,
    /// The task's type.
    pub task_type: String,
    /// Its retry.
    pub retry: RetryView,
}

/// Where the next page of a listing starts: the last key of this one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PageCursor {
    /// The next page's `from`.
    pub from: String,
    /// The next page's `fromOrderingId`.
    pub from_ordering_id: String,
    /// The next page's `fromUniquenessKey`.
    pub from_uniqueness_key: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_states_name_is_its_json_spelling() {
        for state in PendingState::ALL {
            let json = serde_json::to_value(state).ok();
            assert_eq!(json, Some(serde_json::Value::from(state.as_str())));
        }
    }

    /// The answers that were built with `json!` (sorted keys) keep their bytes as structs.
    #[test]
    fn ready_cancel_and_error_answers_keep_their_bytes() {
        let ready = ReadyResponse {
            owned_partitions: vec![0, 3],
            ready: true,
        };
        let before = serde_json::json!({ "ready": true, "ownedPartitions": [0, 3] });
        assert_eq!(serde_json::to_string(&ready).ok(), Some(before.to_string()));

        let cancel = CancelResponse {
            note: "n".into(),
            partition: 2,
            result: "cancellation enqueued".into(),
            task: "o/2026-11-22T06:00:00.000Z/u".into(),
        };
        let before = serde_json::json!({
            "result": "cancellation enqueued",
            "task": "o/2026-11-22T06:00:00.000Z/u",
            "partition": 2,
            "note": "n",
        });
        assert_eq!(
            serde_json::to_string(&cancel).ok(),
            Some(before.to_string())
        );

        let error = ErrorResponse { error: "e".into() };
        assert_eq!(
            serde_json::to_string(&error).ok().as_deref(),
            Some(r#"{"error":"e"}"#)
        );
    }

    #[test]
    fn a_task_answer_is_camel_case_and_reads_back_as_it_was_written() {
        let task = TaskResponse {
            ordering_id: "o".into(),
            scheduled_time: "2026-11-22T06:00:00.000Z".into(),
            uniqueness_key: "u".into(),
            partition: 1,
            status: "pending".into(),
            attempts: 0,
            last_error: None,
            updated_at: None,
            task_data: Some(serde_json::json!({"a": 1})),
            history: vec![],
        };
        let text = serde_json::to_string(&task).unwrap_or_default();
        assert_eq!(
            text,
            r#"{"orderingId":"o","scheduledTime":"2026-11-22T06:00:00.000Z","uniquenessKey":"u","partition":1,"status":"pending","attempts":0,"lastError":null,"updatedAt":null,"taskData":{"a":1},"history":[]}"#
        );
        let back: Result<TaskResponse, _> = serde_json::from_str(&text);
        assert_eq!(back.ok(), Some(task));
    }
}

/// `GET /api/v1/dead-letters`'s query: a filter, a page size, and the key a page resumes after.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetterQuery {
    /// Only dead letters of this task type.
    pub task_type: Option<String>,
    /// Tasks due at or after this time (RFC 3339); default: any.
    pub from: Option<String>,
    /// Tasks due before this time (RFC 3339); default: any.
    pub to: Option<String>,
    /// Dead letters per page, 1..1000 (default 100).
    pub limit: Option<usize>,
    /// Whether dead letters already redriven are listed too (default false).
    pub include_redriven: Option<bool>,
    /// With the other two `after…` fields, the task the previous page ended at.
    pub after_ordering_id: Option<String>,
    /// See `after_ordering_id`.
    pub after_scheduled_time: Option<String>,
    /// See `after_ordering_id`.
    pub after_uniqueness_key: Option<String>,
}

/// `GET /api/v1/dead-letters`'s answer: a page, in task-key order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeadLettersResponse {
    /// The page's dead letters.
    pub dead_letters: Vec<DeadLetterView>,
    /// Query parameters for the next page (with the same filter and limit), or null at the end.
    pub next: Option<DeadLetterCursor>,
}

/// Where the next page of dead letters starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetterCursor {
    /// `afterOrderingId`.
    pub after_ordering_id: String,
    /// `afterScheduledTime`.
    pub after_scheduled_time: String,
    /// `afterUniquenessKey`.
    pub after_uniqueness_key: String,
}

/// One dead letter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetterView {
    /// The task's orderingId.
    pub ordering_id: String,
    /// The task's scheduled time.
    pub scheduled_time: String,
    /// The task's uniquenessKey.
    pub uniqueness_key: String,
    /// The task's type.
    pub task_type: String,
    /// The task's priority.
    pub priority: i32,
    /// The task's partition.
    pub partition: PartitionId,
    /// The task's data.
    pub task_data: Value,
    /// Attempts made.
    pub attempts: u32,
    /// The last attempt's error.
    pub last_error: String,
    /// invalid or retries_exhausted.
    pub reason: String,
    /// When it became a dead letter.
    pub dead_at: String,
    /// When it was last redriven; null if never.
    pub redriven_at: Option<String>,
    /// How many times it was redriven.
    pub redrives: u32,
}

/// `POST /api/v1/dead-letters/redrive` and `.../purge`: which dead letters. One of: a task's
/// key (all three key fields), a filter (`taskType`, `from`, `to`, any of them), or `all`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetterSelection {
    /// The task's orderingId (with `scheduledTime` and `uniquenessKey`).
    pub ordering_id: Option<String>,
    /// The task's scheduled time, RFC 3339.
    pub scheduled_time: Option<String>,
    /// The task's uniquenessKey.
    pub uniqueness_key: Option<String>,
    /// Dead letters of this type.
    pub task_type: Option<String>,
    /// Dead letters of tasks due at or after this time.
    pub from: Option<String>,
    /// Dead letters of tasks due before this time.
    pub to: Option<String>,
    /// Every dead letter.
    #[serde(default)]
    pub all: bool,
}

/// `POST /api/v1/dead-letters/redrive`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RedriveResponse {
    /// How many dead letters were enqueued again.
    pub redriven: usize,
    /// The new tasks' keys (`orderingId/scheduledTime/uniquenessKey`), at most 1,000.
    pub tasks: Vec<String>,
}

/// `POST /api/v1/dead-letters/purge`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PurgeResponse {
    /// How many dead letters were deleted.
    pub purged: usize,
}

/// A suspension: what it holds back, since when and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SuspensionView {
    /// orderingId, taskType or group.
    pub kind: String,
    /// The orderingId, the task type, or `<type>/<id>` for a group.
    pub target: String,
    /// When it was recorded.
    pub since: String,
    /// Why, as the operator said; null if not said.
    pub reason: Option<String>,
}

/// `GET /api/v1/suspensions`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SuspensionsResponse {
    /// Every suspension in force, by kind and target.
    pub suspensions: Vec<SuspensionView>,
}

/// `POST /api/v1/suspensions`'s body. Optional parts, as in [`TaskQuery`], so that a missing
/// one is answered with its name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SuspendRequest {
    /// orderingId, taskType or group.
    pub kind: Option<String>,
    /// The orderingId, the task type, or `<type>/<id>` for a group.
    pub target: Option<String>,
    /// Why (shown by `GET /api/v1/suspensions`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `DELETE /api/v1/suspensions`'s query: the suspension to lift.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SuspensionQuery {
    /// orderingId, taskType or group.
    pub kind: Option<String>,
    /// The orderingId, the task type, or `<type>/<id>` for a group.
    pub target: Option<String>,
}

/// `GET /api/v1/limits`'s answer: the per-key overrides in force, and this node's use of each
/// limited key now.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LimitsResponse {
    /// The overrides set at run time (every node applies them within 2 s), by key.
    pub overrides: Vec<KeyLimitView>,
    /// The keys this node's tasks use a limit of now: permits held, calls running, tasks held.
    pub keys: Vec<KeyUseView>,
}

/// A per-key override: the values it sets over the settings' (`null`: the settings' value).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyLimitView {
    /// The limit key.
    pub limit_key: String,
    /// The task type whose tasks of the key it limits; `null`: the queue's.
    pub task_type: Option<String>,
    /// Calls at once across the cluster.
    pub concurrency: Option<u32>,
    /// Starts a second.
    pub rate: Option<f64>,
    /// Starts at once after a quiet spell.
    pub burst: Option<u32>,
    /// Its share of the executor's slots when tasks wait for them (a key without one: 1).
    pub weight: Option<u32>,
    /// When it was set (ISO 8601).
    pub updated_at: String,
}

/// `PUT /api/v1/limits`' body: an override of one key's limits (replacing its earlier one).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyLimitRequest {
    /// The limit key (1 to 256 bytes).
    pub limit_key: Option<String>,
    /// The task type whose tasks of the key it limits (they then count apart from the queue's);
    /// absent: the queue's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_type: Option<String>,
    /// Calls at once across the cluster (1 to 1,000,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// Starts a second (over 0, at most 1,000,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// Starts at once after a quiet spell (1 to 1,000,000; by default a second's worth of the
    /// rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
    /// Its share of the executor's slots when tasks wait for them (1 to 1,000; a key without
    /// one: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
}

/// `DELETE /api/v1/limits`' query: the override to remove.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyLimitQuery {
    /// The limit key.
    pub limit_key: Option<String>,
    /// Its task type; absent: the queue's override.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_type: Option<String>,
}

/// A limited key this node's tasks use now.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyUseView {
    /// The limit key.
    pub limit_key: String,
    /// The task type whose own limit it counts under; `null`: the queue's.
    pub task_type: Option<String>,
    /// Of its concurrency permits across the cluster, those this node holds.
    pub permits: usize,
    /// Its calls running on this node.
    pub running: usize,
    /// Its due tasks held at the limit on this node (waiting for a permit).
    pub held: usize,
}

/// `GET /api/v1/jobs`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobsResponse {
    /// The queue's jobs (within the status retention), newest first. Each is read from its
    /// completion marks, not its buckets: its counts and items are those of the buckets of
    /// finished nodes of 32 (a bucket whose node has one still running counts as pending), and
    /// `errors` is empty (`GET /api/v1/jobs/{id}` reads every bucket and lists them).
    pub jobs: Vec<JobView>,
}

/// A job and its progress (`GET /api/v1/jobs/{id}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobView {
    /// The job's id.
    pub id: String,
    /// `running`, `suspended`, `completed` (every bucket finished, none failed) or `failed`
    /// (every bucket finished, some failed).
    pub state: String,
    /// The coordinator task (`orderingId/time/uniquenessKey`).
    pub coordinator: String,
    /// The coordinator's task type (its handler joins the buckets).
    pub task_type: String,
    /// The buckets' group id (suspend the job with `--group <taskType>/<group>`).
    pub group: String,
    /// When the coordinator started it (RFC 3339).
    pub started_at: String,
    /// How many buckets it has.
    pub buckets: u32,
    /// Buckets completed.
    pub completed: usize,
    /// Buckets failed (retries exhausted, or invalid).
    pub failed: usize,
    /// Buckets cancelled.
    pub cancelled: usize,
    /// Buckets not finished yet (running or waiting).
    pub pending: usize,
    /// Items the buckets reported processed so far (in a list: those of finished nodes of 32
    /// buckets).
    pub items: u64,
    /// Whether the job is suspended (its buckets not yet running wait).
    pub suspended: bool,
    /// The failed buckets and why (at most 100; empty in a list).
    pub errors: Vec<BucketError>,
}

/// A failed bucket of a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BucketError {
    /// The bucket's number, from 1.
    pub bucket: u32,
    /// The bucket task.
    pub task: String,
    /// `failed` or `dropped`.
    pub status: String,
    /// Its last error.
    pub error: String,
}

/// A recurring schedule and where its chain stands (`GET /api/v1/schedules`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleView {
    /// The definition, as created.
    pub definition: crate::recurring::ScheduleSpec,
    /// The cadence in words (`every 2s`, or croner's English for a cron expression).
    pub description: String,
    /// Paused: no run is enqueued until it is resumed.
    pub paused: bool,
    /// Changes on every create and resume (the chain's ticks carry it).
    pub revision: i64,
    /// When it was first created.
    pub created_at: String,
    /// When it was last created, paused or resumed.
    pub updated_at: String,
    /// The fire time of its pending tick; null when paused.
    pub next_fire: Option<String>,
    /// The fire time of the last run enqueued since the schedule was last (re)defined.
    pub last_fire: Option<String>,
    /// Its pending tick is over a minute overdue (no node runs it: nodes down, or its ticks
    /// were dead-lettered); creating the same definition again restarts it.
    pub stalled: bool,
}

/// `GET /api/v1/schedules`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchedulesResponse {
    /// Every schedule of the queue, by id.
    pub schedules: Vec<ScheduleView>,
}

/// What one fire did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FireView {
    /// The fire time.
    pub fire_time: String,
    /// enqueued, skippedOverlap or missed.
    pub outcome: String,
    /// For enqueued: when the run is due (the fire time plus its jitter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_time: Option<String>,
    /// For missed: how many fire times were passed over, from this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missed_count: Option<u64>,
    /// For missed: the last of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missed_last: Option<String>,
    /// The run's uniquenessKey (in the run's orderingId), for enqueued fires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_key: Option<String>,
}

/// `GET /api/v1/schedules/{id}`'s answer: the schedule, its next fire times and its last fires.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleDetail {
    /// The schedule.
    pub schedule: ScheduleView,
    /// Its next fire times (none while paused).
    pub upcoming: Vec<String>,
    /// Its last fires (within the status retention), newest first.
    pub fires: Vec<FireView>,
}

/// `POST /api/v1/schedules/preview`'s answer: what a definition would do, without creating it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreviewResponse {
    /// The cadence in words.
    pub description: String,
    /// Its next fire times from now.
    pub upcoming: Vec<String>,
}

/// The optional `count` of `GET /api/v1/schedules/{id}` and `POST /api/v1/schedules/preview`:
/// how many next fire times to show (default 5, at most 100).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreviewQuery {
    /// How many.
    pub count: Option<usize>,
}

/// `POST /api/v1/tasks`'s answer. 201: every task was acknowledged by the broker. 400: a task
/// of the request was refused (each one in `failed`), and none was sent. 502: the broker did
/// not acknowledge some (in `failed`; those in `enqueued` were), so the caller may send the
/// request again (a task sent twice with the same key is one task).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnqueueResponse {
    /// What went wrong, when something did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The tasks the broker acknowledged, in the request's order.
    pub enqueued: Vec<EnqueuedTask>,
    /// The tasks refused or not acknowledged, by their place in the request (from 0).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<EnqueueFailure>,
}

/// A task of [`EnqueueResponse`] the broker acknowledged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnqueuedTask {
    /// Its key, `orderingId/scheduledTime/uniquenessKey`.
    pub task: String,
    /// Its type.
    pub task_type: String,
    /// The partition it went to (the partition of its orderingId).
    pub partition: PartitionId,
}

/// A task of [`EnqueueResponse`] that was not enqueued.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnqueueFailure {
    /// Its place in the request, from 0 (0 for a single task).
    pub index: usize,
    /// Why.
    pub error: String,
}

/// `POST /api/v1/workers/poll`: the claims a worker's poll took (none if its wait ended first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PollResponse {
    /// The claims, at most the poll's capacity.
    pub claims: Vec<crate::remote::ClaimView>,
}

/// `POST /api/v1/claims/{claimId}/heartbeat`: the live claim's new expiry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeartbeatResponse {
    /// RFC 3339.
    pub expires_at: String,
    /// The claim's time to live: heartbeat again well within it.
    pub ttl_ms: u64,
}

/// `POST /api/v1/claims/{claimId}/complete`: taken by the call that offered the task, which
/// records it as it records a local call's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimCompleted {
    /// Always true: a refused completion is answered 409.
    pub accepted: bool,
}

/// `GET /api/v1/workers`: the connected workers with their live claims, and the tasks offered
/// and not claimed yet, by type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkersResponse {
    /// The connected workers (polling, or polled within `[workers] worker_ttl`).
    pub workers: Vec<crate::remote::WorkerView>,
    /// Tasks offered and not claimed yet, by type.
    pub waiting: std::collections::BTreeMap<String, usize>,
}
