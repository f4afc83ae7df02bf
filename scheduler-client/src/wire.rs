//! Wire format v1: the JSON record on the scheduler's topic, so that any language can enqueue by
//! writing to the topic. (One file over 400 lines: the format, its limits, its encoder and its
//! decoder are one contract, read together; the tests are in `wire/tests.rs`.)
//!
//! ```json
//! {"version":1,"orderingId":"...","scheduledTime":"2026-11-22T06:00:00.000Z","uniquenessKey":"...","taskData":{}}
//! {"version":1,"orderingId":"...","scheduledTime":"...","uniquenessKey":"...","taskData":{},"taskType":"send-email","priority":5}
//! ```
//!
//! `taskType` and `priority` are optional and written only when they differ from their defaults
//! (`"default"` and 0), so a task without them is byte for byte a record of the first release,
//! and every such record stays valid. The table of every field is in design.md ("Wire format").
//!
//! The record's Kafka key is the `orderingId` and its partition is [`crate::partition_for`] of it.
//! Unknown fields are ignored, so later versions can add fields that v1 readers skip.
//!
//! A task may belong to a group (`group`: `id`, `index` from 1, optional `total`, `failFast`
//! and `joinType`; see [`crate::GroupMember`]); the engine's join task of a group carries `joinOf`,
//! the group's id:
//!
//! ```json
//! {"version":1,"orderingId":"...","scheduledTime":"...","uniquenessKey":"...","taskData":{},"group":{"id":"recon-x","index":3,"total":100}}
//! ```
//!
//! A task may carry a limit key (`limitKey`, e.g. a tenant or an upstream API), independent of
//! its `orderingId`: the key per-key limits count it under.
//!
//! A task may carry a conflict mode (`onConflict`: `replace`, `keepTime`, `debounce` with
//! `maxWaitMs`, or `ifAbsent`; see [`crate::OnConflict`]), applied by the owning node to a pending
//! task of the same identity (orderingId and uniquenessKey).
//!
//! A control record cancels a task, or (by identity) reschedules or cancels the pending task of
//! an identity scheduled with a conflict mode. It goes to the task's partition, so the owning
//! node applies it in order with the tasks:
//!
//! ```json
//! {"version":1,"type":"cancel","orderingId":"...","scheduledTime":"2026-11-22T06:00:00.000Z","uniquenessKey":"..."}
//! {"version":1,"type":"cancel","orderingId":"...","uniquenessKey":"..."}
//! {"version":1,"type":"reschedule","orderingId":"...","uniquenessKey":"...","scheduledTime":"2026-11-22T07:00:00.000Z"}
//! ```
//!
//! ## Limits
//!
//! The client ([`crate::Scheduler`]) refuses what breaks them before sending, and the node's
//! decoder refuses (parks, with a reason) records that break them, by the same check
//! ([`check_task`], [`check_key`], [`check_time`]), so a task the client accepted is one the
//! node runs. Every bound below is what the node's store holds (a CQL `int`, a clustering key)
//! or what its arithmetic handles, checked before a record reaches the store, not found by a
//! write refused on every retry:
//!
//! - `orderingId` and `uniquenessKey` are not empty, and at most [`MAX_ORDERING_ID_BYTES`] and
//!   [`MAX_UNIQUENESS_KEY_BYTES`] (1,024 each) bytes of UTF-8: with `scheduledTime` they are
//!   Cassandra's clustering key, which must stay below 64 KiB. This holds for cancellations too.
//! - `taskType` is 1 to [`MAX_TASK_TYPE_BYTES`] (128) bytes of ASCII letters, digits and
//!   `-_.:/`: it names metrics series and appears in `--exec type=command` arguments.
//! - `priority` is an integer in the i32 range.
//! - `limitKey`, when present, is 1 to [`MAX_LIMIT_KEY_BYTES`] (256) bytes of UTF-8.
//! - `scheduledTime` is RFC 3339 and, in UTC, from [`earliest_time`] (1900-01-01T00:00:00.000Z:
//!   loading a partition with no low-water mark starts before it) to [`latest_time`]
//!   (9999-12-31T23:59:59.999Z: RFC 3339 has four-digit years, so the engine can write any time
//!   it holds back to the wire), in tasks and control records alike ([`check_time`]).
//! - A group's `index` and `total` are at most [`MAX_GROUP_NUMBER`] (10,000): the largest group,
//!   whose join holds every member's outcome.
//! - `debounce`'s `maxWaitMs` is at most [`MAX_DEBOUNCE_WAIT_MS`], the span from the earliest time
//!   to the latest: the engine adds it to a time, and a longer wait could never cap one.
//! - `taskData` is a JSON object nested at most [`MAX_TASK_DATA_DEPTH`] (64) levels deep, the
//!   object itself being level 1 (the node's JSON parser stops at 128 levels).
//! - Numbers arrive exactly: integers must fit i64 or u64 (the decoder refuses larger ones, which
//!   it could only read as rounded floats; a [`Value`] cannot hold them), and floats are read to
//!   the nearest double, so a double arrives unchanged.
//! - The whole record is at most the node's `scheduling.max_task_data_bytes`; the client's
//!   `max_task_bytes` (both 512 KiB by default) must not exceed it.
//!
//! Over 500 lines: the wire format v1, its encoder and its decoder with every field's check, in one
//! place so that the two never drift apart.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::task::{GroupMember, OnConflict, Task, TaskData, TaskIdentity, TaskKey};

/// The wire format version this crate writes.
pub const WIRE_VERSION: u64 = 1;

/// How deep `taskData` may nest, the `taskData` object itself being level 1. The node's parser
/// (serde_json) gives up at 128 levels, the record object around `taskData` included; 64 stays
/// far from that, also when the node parses `taskData` again from Cassandra.
pub const MAX_TASK_DATA_DEPTH: usize = 64;

/// The longest `orderingId`, in UTF-8 bytes. Cassandra keys the schedule by `scheduledTime`,
/// `orderingId` and `uniquenessKey` and refuses a key over 64 KiB on every retry, which would stall
/// the partition; 1 KiB for each of the two leaves the key near 2 KiB, far below.
pub const MAX_ORDERING_ID_BYTES: usize = 1024;

/// The longest `uniquenessKey`, in UTF-8 bytes (see [`MAX_ORDERING_ID_BYTES`]).
pub const MAX_UNIQUENESS_KEY_BYTES: usize = 1024;

/// The longest group id (`group.id`, `joinOf`), in UTF-8 bytes: it is the join task's
/// orderingId.
pub const MAX_GROUP_ID_BYTES: usize = MAX_ORDERING_ID_BYTES;

/// The longest `taskType`, in bytes.
pub const MAX_TASK_TYPE_BYTES: usize = 128;

/// The longest `limitKey`, in UTF-8 bytes: a name (a tenant, an upstream API), held in memory
/// by every node that runs tasks of it and shown by the admin API.
pub const MAX_LIMIT_KEY_BYTES: usize = 256;

/// The highest group `index` and `total`: the largest group. Its join is given every member's
/// outcome in memory (each result up to 16 KiB: at most 160 MiB), and its members' numbers fit
/// the group table's CQL `int` columns, which Cassandra would refuse on every retry of the
/// member's final step (the member then never finished and its orderingId stalled).
pub const MAX_GROUP_NUMBER: u32 = 10_000;

/// [`earliest_time`] in milliseconds since the Unix epoch: 1900-01-01T00:00:00.000Z.
const EARLIEST_TIME_MS: i64 = -2_208_988_800_000;

/// [`latest_time`] in milliseconds since the Unix epoch: 9999-12-31T23:59:59.999Z.
const LATEST_TIME_MS: i64 = 253_402_300_799_999;

/// The longest `maxWaitMs` of `debounce`: the span from [`earliest_time`] to [`latest_time`]. The
/// engine adds the wait to a pending task's time; a longer wait could never cap a time (it would
/// only overflow that sum).
pub const MAX_DEBOUNCE_WAIT_MS: u64 = (LATEST_TIME_MS - EARLIEST_TIME_MS) as u64;

/// Why a task's content cannot be run: the one check that the client makes before sending and
/// the node's decoder makes before scheduling, so that what the client accepts, the node runs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContentError {
    /// `orderingId` is empty.
    #[error("the task's orderingId is empty")]
    EmptyOrderingId,
    /// `uniquenessKey` is empty.
    #[error("the task's uniquenessKey is empty")]
    EmptyUniquenessKey,
    /// `orderingId` or `uniquenessKey` is longer than [`MAX_ORDERING_ID_BYTES`] or
    /// [`MAX_UNIQUENESS_KEY_BYTES`].
    #[error("{field} is {bytes} bytes, over the {max}-byte limit")]
    FieldTooLong {
        /// `orderingId` or `uniquenessKey`.
        field: &'static str,
        /// Its length in bytes.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// `taskData` nests deeper than [`MAX_TASK_DATA_DEPTH`].
    #[error("taskData is nested deeper than {max} levels")]
    TaskDataTooDeep {
        /// The limit, [`MAX_TASK_DATA_DEPTH`].
        max: usize,
    },
    /// `taskType` is empty, longer than [`MAX_TASK_TYPE_BYTES`] or holds a character outside
    /// ASCII letters, digits and `-_.:/`.
    #[error("taskType {0:?} is not 1 to 128 ASCII letters, digits or -_.:/")]
    BadTaskType(String),
    /// `group` or `joinOf` breaks its limits (see [`check_group`]).
    #[error("group {0}")]
    BadGroup(String),
    /// The conflict mode breaks its limits: `debounce`'s wait is over
    /// [`MAX_DEBOUNCE_WAIT_MS`].
    #[error("onConflict {0}")]
    BadConflict(String),
    /// `scheduledTime` is outside [`earliest_time`] to [`latest_time`] (see [`check_time`]).
    #[error(
        "scheduledTime {0} is outside 1900-01-01T00:00:00.000Z to 9999-12-31T23:59:59.999Z, the times the engine holds"
    )]
    TimeOutOfRange(String),
    /// `limitKey` is empty or longer than [`MAX_LIMIT_KEY_BYTES`].
    #[error("limitKey is {0} bytes, not 1 to 256")]
    BadLimitKey(usize),
}

/// Checks a limit key: 1 to [`MAX_LIMIT_KEY_BYTES`] bytes.
pub fn check_limit_key(limit_key: Option<&str>) -> Result<(), ContentError> {
    match limit_key {
        Some(key) if key.is_empty() || key.len() > MAX_LIMIT_KEY_BYTES => {
            Err(ContentError::BadLimitKey(key.len()))
        }
        _ => Ok(()),
    }
}

/// Checks a group membership and a join's group id: ids of 1 to [`MAX_GROUP_ID_BYTES`] bytes,
/// member numbers from 1 to [`MAX_GROUP_NUMBER`], and no number above the total.
pub fn check_group(
    member: Option<&GroupMember>,
    join_of: Option<&str>,
) -> Result<(), ContentError> {
    let bad = |why: String| Err(ContentError::BadGroup(why));
    for id in member.map(|m| m.id.as_str()).into_iter().chain(join_of) {
        if id.is_empty() || id.len() > MAX_GROUP_ID_BYTES {
            return bad(format!(
                "id is {} bytes, not 1 to {MAX_GROUP_ID_BYTES}",
                id.len()
            ));
        }
    }
    if let Some(member) = member {
        if member.index == 0 {
            return bad("index must be 1 or more".to_string());
        }
        for (field, number) in [("index", Some(member.index)), ("total", member.total)] {
            match number {
                Some(n) if n > MAX_GROUP_NUMBER => {
                    return bad(format!(
                        "{field} {n} is over {MAX_GROUP_NUMBER}, the largest group"
                    ))
                }
                _ => {}
            }
        }
        if let Some(join_type) = &member.join_type {
            if check_task_type(join_type).is_err() {
                return bad(format!("joinType {join_type:?} is not a task type"));
            }
        }
        match member.total {
            Some(0) => return bad("total must be 1 or more".to_string()),
            Some(total) if member.index > total => {
                return bad(format!("index {} is above the total {total}", member.index))
            }
            _ => {}
        }
    }
    Ok(())
}

/// Checks a task type: 1 to [`MAX_TASK_TYPE_BYTES`] bytes of ASCII letters, digits and `-_.:/`.
pub fn check_task_type(task_type: &str) -> Result<(), ContentError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "-_.:/".contains(c);
    if task_type.is_empty()
        || task_type.len() > MAX_TASK_TYPE_BYTES
        || !task_type.chars().all(allowed)
    {
        let shown: String = task_type.chars().take(MAX_TASK_TYPE_BYTES).collect();
        return Err(ContentError::BadTaskType(shown));
    }
    Ok(())
}

/// Checks a task's key (also a cancellation's): not empty, and short enough for Cassandra.
pub fn check_key(ordering_id: &str, uniqueness_key: &str) -> Result<(), ContentError> {
    if ordering_id.is_empty() {
        return Err(ContentError::EmptyOrderingId);
    }
    if uniqueness_key.is_empty() {
        return Err(ContentError::EmptyUniquenessKey);
    }
    for (field, value, max) in [
        ("orderingId", ordering_id, MAX_ORDERING_ID_BYTES),
        ("uniquenessKey", uniqueness_key, MAX_UNIQUENESS_KEY_BYTES),
    ] {
        if value.len() > max {
            return Err(ContentError::FieldTooLong {
                field,
                bytes: value.len(),
                max,
            });
        }
    }
    Ok(())
}

/// Checks a task's `taskData`: at most [`MAX_TASK_DATA_DEPTH`] levels deep. Numbers need no
/// check: every number a [`Value`] holds (an i64, a u64 or a finite f64) round-trips exactly.
pub fn check_task_data(data: &TaskData) -> Result<(), ContentError> {
    if object_nests_deeper(data, MAX_TASK_DATA_DEPTH) {
        return Err(ContentError::TaskDataTooDeep {
            max: MAX_TASK_DATA_DEPTH,
        });
    }
    Ok(())
}

/// Checks a time a record carries (a task's, a cancellation's, a reschedule's): from
/// [`earliest_time`] to [`latest_time`]. The engine loads a partition with no low-water mark from
/// before the earliest, and writes every time it holds back to the wire (joins, sub-tasks,
/// redrives, the admin API) in RFC 3339, whose years have four digits.
pub fn check_time(time: DateTime<Utc>) -> Result<(), ContentError> {
    if time < earliest_time() || time > latest_time() {
        return Err(ContentError::TimeOutOfRange(format_time(time)));
    }
    Ok(())
}

/// Checks a conflict mode: `debounce`'s wait at most [`MAX_DEBOUNCE_WAIT_MS`].
pub fn check_conflict(mode: Option<OnConflict>) -> Result<(), ContentError> {
    match mode.and_then(OnConflict::max_wait) {
        Some(wait) if wait.as_millis() > u128::from(MAX_DEBOUNCE_WAIT_MS) => {
            Err(ContentError::BadConflict(format!(
                "debounce: maxWaitMs {} is over {MAX_DEBOUNCE_WAIT_MS}, the span of the times the engine holds",
                wait.as_millis()
            )))
        }
        _ => Ok(()),
    }
}

/// Checks everything about a task that decides whether the node can run it: the one check the
/// client makes before sending and the node's decoder makes before scheduling. Its time is
/// checked against the range the engine holds ([`check_time`]), not against a clock (the client
/// checks that; the node takes a time however late).
pub fn check_task(task: &Task) -> Result<(), ContentError> {
    check_key(&task.ordering_id, &task.uniqueness_key)?;
    check_time(task.scheduled_time)?;
    check_task_type(&task.task_type)?;
    check_conflict(task.on_conflict)?;
    check_group(task.group.as_ref(), task.join_of.as_deref())?;
    check_group_conflict(task)?;
    check_limit_key(task.limit_key.as_deref())?;
    check_task_data(&task.task_data)
}

/// Refuses a group member with a conflict mode (but a join, which the engine gives one): a
/// member superseded or ignored by its identity would never finish its group.
pub fn check_group_conflict(task: &Task) -> Result<(), ContentError> {
    if task.group.is_some() && task.on_conflict.is_some() && task.join_of.is_none() {
        return Err(ContentError::BadGroup(
            "member with onConflict: a member superseded or ignored by its identity would never finish its group".to_string(),
        ));
    }
    Ok(())
}

/// Whether `map`, one level with `levels` allowed, nests deeper; recursion stops when `levels`
/// runs out, so a value nested a million deep cannot overflow the stack here.
fn object_nests_deeper(map: &TaskData, levels: usize) -> bool {
    levels == 0 || map.values().any(|v| nests_deeper(v, levels - 1))
}

fn nests_deeper(value: &Value, levels: usize) -> bool {
    match value {
        Value::Object(map) => object_nests_deeper(map, levels),
        Value::Array(items) => levels == 0 || items.iter().any(|v| nests_deeper(v, levels - 1)),
        _ => false,
    }
}

/// Why a record could not be decoded as a task.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The record is larger than the node accepts.
    #[error("record of {size} bytes exceeds the {max}-byte limit")]
    TooLarge {
        /// Record size in bytes.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The record has no value (a tombstone or an empty message).
    #[error("record has no value")]
    Empty,
    /// The value is not a JSON object of the expected shape (including invalid UTF-8).
    #[error("not a JSON task record: {0}")]
    Json(#[from] serde_json::Error),
    /// The record's `version` is not one this node reads.
    #[error("unsupported wire format version {0} (this node reads version {WIRE_VERSION})")]
    UnsupportedVersion(u64),
    /// A required field is absent.
    #[error("missing field `{0}`")]
    MissingField(&'static str),
    /// A required string field is empty.
    #[error("field `{0}` is empty")]
    EmptyField(&'static str),
    /// `scheduledTime` is not an RFC 3339 timestamp.
    #[error("scheduledTime {value:?} is not an RFC 3339 timestamp: {source}")]
    BadScheduledTime {
        /// The value found.
        value: String,
        /// The parse error.
        source: chrono::ParseError,
    },
    /// `taskData` is present but not a JSON object.
    #[error("taskData must be a JSON object")]
    TaskDataNotObject,
    /// `type` names no record type this node knows.
    #[error("unknown record type {0:?} (this node knows \"task\" and \"cancel\")")]
    UnknownType(String),
    /// `taskData` nests deeper than [`MAX_TASK_DATA_DEPTH`].
    #[error("taskData is nested deeper than {max} levels")]
    TaskDataTooDeep {
        /// The limit, [`MAX_TASK_DATA_DEPTH`].
        max: usize,
    },
    /// `taskData` holds an integer beyond the 64-bit range (i64 and u64), which the node could
    /// only read as a rounded float.
    #[error("taskData holds the integer {0}, beyond the 64-bit range the node reads exactly")]
    IntegerOutOfRange(String),
    /// `orderingId` or `uniquenessKey` is longer than [`MAX_ORDERING_ID_BYTES`] or
    /// [`MAX_UNIQUENESS_KEY_BYTES`] (Cassandra would refuse the row on every retry).
    #[error("{field} is {bytes} bytes, over the {max}-byte limit")]
    FieldTooLong {
        /// `orderingId` or `uniquenessKey`.
        field: &'static str,
        /// Its length in bytes.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// `taskType` breaks its limits (see [`check_task_type`]).
    #[error("taskType {0:?} is not 1 to 128 ASCII letters, digits or -_.:/")]
    BadTaskType(String),
    /// `onConflict` names no mode, or `debounce` comes without `maxWaitMs`.
    #[error("onConflict {0}")]
    BadConflict(String),
    /// `group` or `joinOf` breaks its limits (see [`check_group`]).
    #[error("group {0}")]
    BadGroup(String),
    /// `scheduledTime` is outside the times the engine holds (see [`check_time`]).
    #[error(
        "scheduledTime {0} is outside 1900-01-01T00:00:00.000Z to 9999-12-31T23:59:59.999Z, the times the engine holds"
    )]
    TimeOutOfRange(String),
    /// `limitKey` breaks its limits (see [`check_limit_key`]).
    #[error("limitKey is {0} bytes, not 1 to 256")]
    BadLimitKey(usize),
}

impl From<ContentError> for DecodeError {
    fn from(error: ContentError) -> Self {
        match error {
            ContentError::EmptyOrderingId => DecodeError::EmptyField("orderingId"),
            ContentError::EmptyUniquenessKey => DecodeError::EmptyField("uniquenessKey"),
            ContentError::FieldTooLong { field, bytes, max } => {
                DecodeError::FieldTooLong { field, bytes, max }
            }
            ContentError::TaskDataTooDeep { max } => DecodeError::TaskDataTooDeep { max },
            ContentError::BadTaskType(found) => DecodeError::BadTaskType(found),
            ContentError::BadGroup(why) => DecodeError::BadGroup(why),
            ContentError::BadConflict(why) => DecodeError::BadConflict(why),
            ContentError::TimeOutOfRange(time) => DecodeError::TimeOutOfRange(time),
            ContentError::BadLimitKey(bytes) => DecodeError::BadLimitKey(bytes),
        }
    }
}

/// A decoded record: a task to schedule, or the cancellation of one.
// A record is decoded, matched and its task moved on once; none is kept in a collection of
// records, so boxing the task would cost an allocation a record and save no memory.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// Schedule (or replace) this task.
    Task(Task),
    /// Cancel the task with this key: it never runs afterwards (unless it already finished).
    Cancel(TaskKey),
    /// Cancel the pending task of this identity (scheduled with a conflict mode).
    CancelIdentity(TaskIdentity),
    /// Move the pending task of this identity (scheduled with a conflict mode) to this time.
    Reschedule(TaskIdentity, DateTime<Utc>),
}

impl DecodeError {
    /// A short, stable name for the kind of problem (a metrics label).
    pub fn reason(&self) -> &'static str {
        match self {
            DecodeError::TooLarge { .. } => "too_large",
            DecodeError::Empty => "empty",
            DecodeError::Json(_) => "json",
            DecodeError::UnsupportedVersion(_) => "version",
            DecodeError::MissingField(_) => "missing_field",
            DecodeError::EmptyField(_) => "empty_field",
            DecodeError::BadScheduledTime { .. } | DecodeError::TimeOutOfRange(_) => "bad_time",
            DecodeError::TaskDataNotObject => "task_data",
            DecodeError::UnknownType(_) => "type",
            DecodeError::TaskDataTooDeep { .. } => "too_deep",
            DecodeError::IntegerOutOfRange(_) => "number",
            DecodeError::FieldTooLong { .. } => "field_too_long",
            DecodeError::BadTaskType(_) => "task_type",
            DecodeError::BadConflict(_) => "conflict",
            DecodeError::BadGroup(_) => "group",
            DecodeError::BadLimitKey(_) => "limit_key",
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireOut<'a> {
    version: u64,
    ordering_id: &'a str,
    scheduled_time: String,
    uniqueness_key: &'a str,
    task_data: &'a TaskData,
    #[serde(skip_serializing_if = "is_default_type")]
    task_type: &'a str,
    #[serde(skip_serializing_if = "is_zero")]
    priority: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    on_conflict: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_wait_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    group: Option<WireGroup>,
    #[serde(skip_serializing_if = "Option::is_none")]
    join_of: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit_key: Option<&'a str>,
}

/// `group` on the wire: `{"id":"...","index":3,"total":200,"failFast":true,"joinType":"..."}`
/// (`total`, `failFast` and `joinType` optional).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireGroup {
    id: String,
    index: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    total: Option<u32>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    fail_fast: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    join_type: Option<String>,
}

impl From<&GroupMember> for WireGroup {
    fn from(member: &GroupMember) -> Self {
        WireGroup {
            id: member.id.clone(),
            index: member.index,
            total: member.total,
            fail_fast: member.fail_fast,
            join_type: member.join_type.clone(),
        }
    }
}

impl From<WireGroup> for GroupMember {
    fn from(wire: WireGroup) -> Self {
        GroupMember {
            id: wire.id,
            index: wire.index,
            total: wire.total,
            fail_fast: wire.fail_fast,
            join_type: wire.join_type,
        }
    }
}

/// What the node stores of a task besides its columns (a `grouping` column, named for what it
/// first held): the wire's `group`, `joinOf` and `limitKey`, and the record's `traceparent`
/// header, in one JSON object. Readers ignore fields they do not know, so a field added here needs no schema
/// change and older nodes read newer rows.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Grouping {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    group: Option<WireGroup>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    join_of: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    trace_parent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    limit_key: Option<String>,
}

/// A task's `group`, `joinOf`, `limitKey` and trace context as one JSON text, for storage;
/// `None` when it has none of them.
pub fn encode_grouping(task: &Task) -> Option<String> {
    if task.group.is_none()
        && task.join_of.is_none()
        && task.trace_parent.is_none()
        && task.limit_key.is_none()
    {
        return None;
    }
    let grouping = Grouping {
        group: task.group.as_ref().map(WireGroup::from),
        join_of: task.join_of.clone(),
        trace_parent: task.trace_parent.clone(),
        limit_key: task.limit_key.clone(),
    };
    serde_json::to_string(&grouping).ok()
}

/// `task` with the fields stored as [`encode_grouping`] wrote them.
pub fn with_grouping(mut task: Task, stored: Option<&str>) -> Result<Task, serde_json::Error> {
    if let Some(text) = stored {
        let grouping: Grouping = serde_json::from_str(text)?;
        task.group = grouping.group.map(GroupMember::from);
        task.join_of = grouping.join_of;
        task.trace_parent = grouping.trace_parent;
        task.limit_key = grouping.limit_key;
    }
    Ok(task)
}

fn is_default_type(task_type: &&str) -> bool {
    *task_type == crate::task::DEFAULT_TASK_TYPE
}

fn is_zero(priority: &i32) -> bool {
    *priority == 0
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireIn<'a> {
    version: Option<u64>,
    #[serde(rename = "type")]
    record_type: Option<String>,
    ordering_id: Option<String>,
    scheduled_time: Option<String>,
    uniqueness_key: Option<String>,
    /// Kept as text (which serde_json checks without a depth limit) and scanned before it is
    /// parsed, so that too deep a `taskData` is refused as such, not as a parser failure, and an
    /// integer too large for 64 bits is refused, not rounded.
    #[serde(borrow)]
    task_data: Option<&'a RawValue>,
    task_type: Option<String>,
    priority: Option<i32>,
    on_conflict: Option<String>,
    max_wait_ms: Option<u64>,
    group: Option<WireGroup>,
    join_of: Option<String>,
    limit_key: Option<String>,
}

/// The latest time the wire format carries: RFC 3339 has four-digit years.
pub fn latest_time() -> DateTime<Utc> {
    DateTime::from_timestamp_millis(LATEST_TIME_MS).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// The earliest time a task may have, 1900-01-01T00:00:00.000Z: loading a partition that has no
/// low-water mark starts before it (`scheduler_core::store::schedule_start`).
pub fn earliest_time() -> DateTime<Utc> {
    DateTime::from_timestamp_millis(EARLIEST_TIME_MS).unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// Formats a time as the wire format does: RFC 3339, UTC, milliseconds, `Z`.
pub fn format_time(time: DateTime<Utc>) -> String {
    time.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Encodes a task as a v1 record value.
pub fn encode(task: &Task) -> Vec<u8> {
    let out = WireOut {
        version: WIRE_VERSION,
        ordering_id: &task.ordering_id,
        scheduled_time: format_time(task.scheduled_time),
        uniqueness_key: &task.uniqueness_key,
        task_data: &task.task_data,
        task_type: &task.task_type,
        priority: task.priority,
        on_conflict: task.on_conflict.map(OnConflict::as_str),
        max_wait_ms: task
            .on_conflict
            .and_then(OnConflict::max_wait)
            .map(|wait| u64::try_from(wait.as_millis()).unwrap_or(u64::MAX)),
        group: task.group.as_ref().map(WireGroup::from),
        join_of: task.join_of.as_deref(),
        limit_key: task.limit_key.as_deref(),
    };
    // Serializing strings and a JSON map into a Vec cannot fail.
    serde_json::to_vec(&out).unwrap_or_default()
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ControlOut<'a> {
    version: u64,
    #[serde(rename = "type")]
    record_type: &'static str,
    ordering_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    scheduled_time: Option<String>,
    uniqueness_key: &'a str,
}

/// Encodes the cancellation of the task with `key` as a v1 control record value.
pub fn encode_cancel(key: &TaskKey) -> Vec<u8> {
    control(
        "cancel",
        &key.ordering_id,
        &key.uniqueness_key,
        Some(key.scheduled_time),
    )
}

/// Encodes the cancellation of the pending task of `identity` as a v1 control record value.
pub fn encode_cancel_identity(identity: &TaskIdentity) -> Vec<u8> {
    control(
        "cancel",
        &identity.ordering_id,
        &identity.uniqueness_key,
        None,
    )
}

/// Encodes moving the pending task of `identity` to `to` as a v1 control record value.
pub fn encode_reschedule(identity: &TaskIdentity, to: DateTime<Utc>) -> Vec<u8> {
    control(
        "reschedule",
        &identity.ordering_id,
        &identity.uniqueness_key,
        Some(to),
    )
}

fn control(
    record_type: &'static str,
    ordering_id: &str,
    uniqueness_key: &str,
    time: Option<DateTime<Utc>>,
) -> Vec<u8> {
    let out = ControlOut {
        version: WIRE_VERSION,
        record_type,
        ordering_id,
        scheduled_time: time.map(format_time),
        uniqueness_key,
    };
    serde_json::to_vec(&out).unwrap_or_default()
}

/// Decodes a task record value (see [`decode_record`] for control records too).
pub fn decode(value: Option<&[u8]>, max_size: usize) -> Result<Task, DecodeError> {
    match decode_record(value, max_size)? {
        Record::Task(task) => Ok(task),
        Record::Cancel(_) | Record::CancelIdentity(_) => {
            Err(DecodeError::UnknownType("cancel".into()))
        }
        Record::Reschedule(..) => Err(DecodeError::UnknownType("reschedule".into())),
    }
}

/// Decodes a record value, refusing values over `max_size` bytes before parsing them.
pub fn decode_record(value: Option<&[u8]>, max_size: usize) -> Result<Record, DecodeError> {
    let bytes = value.filter(|v| !v.is_empty()).ok_or(DecodeError::Empty)?;
    if bytes.len() > max_size {
        return Err(DecodeError::TooLarge {
            size: bytes.len(),
            max: max_size,
        });
    }
    let wire: WireIn = serde_json::from_slice(bytes)?;
    let version = wire.version.ok_or(DecodeError::MissingField("version"))?;
    if version != WIRE_VERSION {
        return Err(DecodeError::UnsupportedVersion(version));
    }
    let ordering_id = required(wire.ordering_id, "orderingId")?;
    let uniqueness_key = required(wire.uniqueness_key, "uniquenessKey")?;
    check_key(&ordering_id, &uniqueness_key)?;
    if wire.record_type.as_deref() == Some("cancel") && wire.scheduled_time.is_none() {
        return Ok(Record::CancelIdentity(TaskIdentity::new(
            ordering_id,
            uniqueness_key,
        )));
    }
    let time = required(wire.scheduled_time, "scheduledTime")?;
    let parsed =
        DateTime::parse_from_rfc3339(&time).map_err(|source| DecodeError::BadScheduledTime {
            value: time.clone(),
            source,
        })?;
    // Kept to the millisecond, as stored; in the range the engine holds, whatever the record.
    let scheduled_time = crate::task::truncate_to_millis(parsed.with_timezone(&Utc));
    check_time(scheduled_time).map_err(|_| DecodeError::TimeOutOfRange(time))?;
    let task = match wire.record_type.as_deref() {
        None | Some("task") => {
            let task_data = match wire.task_data {
                None => TaskData::new(),
                Some(raw) => parse_task_data(raw.get())?,
            };
            check_task_data(&task_data)?;
            let task_type = match wire.task_type {
                Some(task_type) => {
                    check_task_type(&task_type)?;
                    task_type
                }
                None => crate::task::DEFAULT_TASK_TYPE.to_string(),
            };
            let group = wire.group.map(GroupMember::from);
            check_group(group.as_ref(), wire.join_of.as_deref())?;
            let mut task = Task::new(ordering_id, scheduled_time, uniqueness_key, task_data)
                .of_type(task_type)
                .with_priority(wire.priority.unwrap_or(0));
            task.group = group;
            task.join_of = wire.join_of;
            task.limit_key = wire.limit_key;
            match conflict_mode(wire.on_conflict.as_deref(), wire.max_wait_ms)? {
                Some(mode) => task.on_conflict(mode),
                None => task,
            }
        }
        Some("cancel") => {
            let key = Task::new(ordering_id, scheduled_time, uniqueness_key, TaskData::new()).key();
            return Ok(Record::Cancel(key));
        }
        Some("reschedule") => {
            let identity = TaskIdentity::new(ordering_id, uniqueness_key);
            return Ok(Record::Reschedule(identity, scheduled_time));
        }
        Some(other) => return Err(DecodeError::UnknownType(other.to_string())),
    };
    // The client's own check, whole: what it refuses, the node refuses.
    check_task(&task)?;
    Ok(Record::Task(task))
}

/// The conflict mode `onConflict` (and `maxWaitMs`) name.
fn conflict_mode(
    name: Option<&str>,
    max_wait_ms: Option<u64>,
) -> Result<Option<OnConflict>, DecodeError> {
    let Some(name) = name else {
        return Ok(None);
    };
    let max_wait = max_wait_ms.map(std::time::Duration::from_millis);
    match OnConflict::from_parts(name, max_wait) {
        Some(mode) => Ok(Some(mode)),
        None if name == "debounce" => Err(DecodeError::BadConflict(
            "debounce needs maxWaitMs".to_string(),
        )),
        None => Err(DecodeError::BadConflict(format!(
            "{name:?} is not replace, keepTime, debounce or ifAbsent"
        ))),
    }
}

/// Parses `taskData` (valid JSON text) once a scan showed it parses, and exactly.
fn parse_task_data(text: &str) -> Result<TaskData, DecodeError> {
    scan(text)?;
    match serde_json::from_str(text)? {
        Value::Null => Ok(TaskData::new()),
        Value::Object(map) => Ok(map),
        _ => Err(DecodeError::TaskDataNotObject),
    }
}

/// Scans valid JSON text without parsing it: refuses nesting beyond [`MAX_TASK_DATA_DEPTH`]
/// (deeper than serde_json's recursion limit it would not parse at all), and integers beyond 64
/// bits (serde_json would turn them into floats, rounded).
fn scan(text: &str) -> Result<(), DecodeError> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    // Where the number being read starts.
    let mut number = None;
    for (at, &byte) in text.as_bytes().iter().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if byte == b'\\' {
                escaped = true;
            } else if byte == b'"' {
                in_string = false;
            }
            continue;
        }
        if let Some(start) = number {
            if matches!(byte, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') {
                continue;
            }
            check_integer(text.get(start..at).unwrap_or_default())?;
            number = None;
        }
        match byte {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > MAX_TASK_DATA_DEPTH {
                    return Err(DecodeError::TaskDataTooDeep {
                        max: MAX_TASK_DATA_DEPTH,
                    });
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            b'-' | b'0'..=b'9' => number = Some(at),
            _ => {}
        }
    }
    match number {
        Some(start) => check_integer(text.get(start..).unwrap_or_default()),
        None => Ok(()),
    }
}

/// Refuses an integer literal (no fraction, no exponent) that fits neither i64 nor u64.
fn check_integer(literal: &str) -> Result<(), DecodeError> {
    let integer = !literal.contains(['.', 'e', 'E']);
    if integer && literal.parse::<i64>().is_err() && literal.parse::<u64>().is_err() {
        // Keep a 500 KB number out of the logs.
        let shown = match literal.get(..40) {
            Some(head) if literal.len() > 40 => format!("{head}... ({} digits)", literal.len()),
            _ => literal.to_string(),
        };
        return Err(DecodeError::IntegerOutOfRange(shown));
    }
    Ok(())
}

fn required(value: Option<String>, field: &'static str) -> Result<String, DecodeError> {
    match value {
        None => Err(DecodeError::MissingField(field)),
        Some(v) if v.is_empty() => Err(DecodeError::EmptyField(field)),
        Some(v) => Ok(v),
    }
}

#[cfg(test)]
mod tests;
