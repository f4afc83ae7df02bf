//! Wire format v1: the JSON record on the scheduler's topic, so that any language can enqueue by
//! writing to the topic.
//!
//! ```json
//! {"version":1,"orderingId":"...","scheduledTime":"2026-11-22T06:00:00.000Z","uniquenessKey":"...","taskData":{}}
//! ```
//!
//! The record's Kafka key is the `orderingId` and its partition is [`crate::partition_for`] of it.
//! Unknown fields are ignored, so later versions can add fields that v1 readers skip.
//!
//! A control record cancels a task. It goes to the task's partition, so the owning node applies it
//! in order with the tasks:
//!
//! ```json
//! {"version":1,"type":"cancel","orderingId":"...","scheduledTime":"2026-11-22T06:00:00.000Z","uniquenessKey":"..."}
//! ```

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::task::{Task, TaskData, TaskKey};

/// The wire format version this crate writes.
pub const WIRE_VERSION: u64 = 1;

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
}

/// A decoded record: a task to schedule, or the cancellation of one.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// Schedule (or replace) this task.
    Task(Task),
    /// Cancel the task with this key: it never runs afterwards (unless it already finished).
    Cancel(TaskKey),
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
            DecodeError::BadScheduledTime { .. } => "bad_time",
            DecodeError::TaskDataNotObject => "task_data",
            DecodeError::UnknownType(_) => "type",
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
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireIn {
    version: Option<u64>,
    #[serde(rename = "type")]
    record_type: Option<String>,
    ordering_id: Option<String>,
    scheduled_time: Option<String>,
    uniqueness_key: Option<String>,
    task_data: Option<Value>,
}

/// The latest time the wire format carries: RFC 3339 has four-digit years.
pub fn latest_time() -> DateTime<Utc> {
    DateTime::from_timestamp_millis(253_402_300_799_999).unwrap_or(DateTime::<Utc>::MAX_UTC)
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
    };
    // Serializing strings and a JSON map into a Vec cannot fail.
    serde_json::to_vec(&out).unwrap_or_default()
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CancelOut<'a> {
    version: u64,
    #[serde(rename = "type")]
    record_type: &'static str,
    ordering_id: &'a str,
    scheduled_time: String,
    uniqueness_key: &'a str,
}

/// Encodes the cancellation of the task with `key` as a v1 control record value.
pub fn encode_cancel(key: &TaskKey) -> Vec<u8> {
    let out = CancelOut {
        version: WIRE_VERSION,
        record_type: "cancel",
        ordering_id: &key.ordering_id,
        scheduled_time: format_time(key.scheduled_time),
        uniqueness_key: &key.uniqueness_key,
    };
    serde_json::to_vec(&out).unwrap_or_default()
}

/// Decodes a task record value (see [`decode_record`] for control records too).
pub fn decode(value: Option<&[u8]>, max_size: usize) -> Result<Task, DecodeError> {
    match decode_record(value, max_size)? {
        Record::Task(task) => Ok(task),
        Record::Cancel(_) => Err(DecodeError::UnknownType("cancel".into())),
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
    let time = required(wire.scheduled_time, "scheduledTime")?;
    let scheduled_time = DateTime::parse_from_rfc3339(&time)
        .map_err(|source| DecodeError::BadScheduledTime {
            value: time,
            source,
        })?
        .with_timezone(&Utc);
    let task = match wire.record_type.as_deref() {
        None | Some("task") => {
            let task_data = match wire.task_data {
                None | Some(Value::Null) => TaskData::new(),
                Some(Value::Object(map)) => map,
                Some(_) => return Err(DecodeError::TaskDataNotObject),
            };
            Task::new(ordering_id, scheduled_time, uniqueness_key, task_data)
        }
        Some("cancel") => {
            let key = Task::new(ordering_id, scheduled_time, uniqueness_key, TaskData::new()).key();
            return Ok(Record::Cancel(key));
        }
        Some(other) => return Err(DecodeError::UnknownType(other.to_string())),
    };
    Ok(Record::Task(task))
}

fn required(value: Option<String>, field: &'static str) -> Result<String, DecodeError> {
    match value {
        None => Err(DecodeError::MissingField(field)),
        Some(v) if v.is_empty() => Err(DecodeError::EmptyField(field)),
        Some(v) => Ok(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use serde_json::json;

    fn sample() -> Task {
        let data = json!({"to": "ops", "n": 3}).as_object().cloned().unwrap();
        Task::new(
            "order-1",
            Utc.timestamp_millis_opt(1_795_327_200_000)
                .single()
                .unwrap(),
            "u-1",
            data,
        )
    }

    #[test]
    fn encodes_the_documented_v1_shape() {
        let text = String::from_utf8(encode(&sample())).unwrap();
        assert_eq!(
            text,
            r#"{"version":1,"orderingId":"order-1","scheduledTime":"2026-11-22T06:00:00.000Z","uniquenessKey":"u-1","taskData":{"n":3,"to":"ops"}}"#
        );
    }

    #[test]
    fn cancel_records_round_trip_and_unknown_types_are_refused() {
        let key = sample().key();
        let raw = encode_cancel(&key);
        assert_eq!(
            String::from_utf8(raw.clone()).unwrap(),
            r#"{"version":1,"type":"cancel","orderingId":"order-1","scheduledTime":"2026-11-22T06:00:00.000Z","uniquenessKey":"u-1"}"#
        );
        assert_eq!(
            decode_record(Some(&raw), 1 << 20).unwrap(),
            Record::Cancel(key)
        );
        assert!(
            decode(Some(&raw), 1 << 20).is_err(),
            "a cancel is not a task"
        );
        let odd = br#"{"version":1,"type":"pause","orderingId":"o","scheduledTime":"2026-11-22T06:00:00Z","uniquenessKey":"u"}"#;
        let err = decode_record(Some(odd), 1 << 20).unwrap_err();
        assert_eq!(err.reason(), "type");
        let typed = br#"{"version":1,"type":"task","orderingId":"o","scheduledTime":"2026-11-22T06:00:00Z","uniquenessKey":"u"}"#;
        assert!(matches!(
            decode_record(Some(typed), 1 << 20),
            Ok(Record::Task(_))
        ));
    }

    #[test]
    fn numbers_survive_a_round_trip_exactly() {
        // 17-digit floats, subnormals, the ends of the f64 and 64-bit integer ranges. Integers
        // beyond 64 bits cannot be in a `Value` (serde_json reads them as floats), so every
        // number a task can hold round-trips.
        let numbers = [
            json!(0.9062520378876269),
            json!(0.30000000000000004),
            json!(-0.0),
            json!(5e-324),
            json!(2.2250738585072014e-308),
            json!(f64::MAX),
            json!(f64::MIN),
            json!(1e20),
            json!(u64::MAX as f64),
            json!(9_007_199_254_740_993u64),
            json!(u64::MAX),
            json!(i64::MIN),
            json!(i64::MAX),
        ];
        for n in numbers {
            let data = json!({ "n": n.clone(), "list": [n.clone()] });
            let mut task = sample();
            task.task_data = data.as_object().cloned().unwrap();
            let back = decode(Some(&encode(&task)), usize::MAX).unwrap();
            assert_eq!(back, task, "{n}");
            // Same kind (integer or float) and the same digits, not only an equal value.
            assert_eq!(back.task_data["n"].to_string(), n.to_string());
        }
    }

    #[test]
    fn round_trips() {
        let task = sample();
        assert_eq!(decode(Some(&encode(&task)), 1 << 20).unwrap(), task);
    }

    #[test]
    fn accepts_other_offsets_and_unknown_fields() {
        let raw = br#"{"version":1,"orderingId":"o","scheduledTime":"2026-11-22T07:00:00.5+01:00","uniquenessKey":"u","taskData":{},"extra":true}"#;
        let task = decode(Some(raw), 1 << 20).unwrap();
        assert_eq!(format_time(task.scheduled_time), "2026-11-22T06:00:00.500Z");
    }

    #[test]
    fn refuses_bad_records_with_a_reason() {
        let cases: [(&[u8], &str); 8] = [
            (b"not json", "not a JSON task record"),
            (b"\xff\xfe", "not a JSON task record"),
            (br#"{"version":2,"orderingId":"o","scheduledTime":"2026-11-22T06:00:00Z","uniquenessKey":"u"}"#, "unsupported wire format version 2"),
            (br#"{"orderingId":"o","scheduledTime":"2026-11-22T06:00:00Z","uniquenessKey":"u"}"#, "missing field `version`"),
            (br#"{"version":1,"scheduledTime":"2026-11-22T06:00:00Z","uniquenessKey":"u"}"#, "missing field `orderingId`"),
            (br#"{"version":1,"orderingId":"","scheduledTime":"2026-11-22T06:00:00Z","uniquenessKey":"u"}"#, "field `orderingId` is empty"),
            (br#"{"version":1,"orderingId":"o","scheduledTime":"yesterday","uniquenessKey":"u"}"#, "scheduledTime \"yesterday\""),
            (br#"{"version":1,"orderingId":"o","scheduledTime":"2026-11-22T06:00:00Z","uniquenessKey":"u","taskData":[1]}"#, "taskData must be a JSON object"),
        ];
        for (raw, reason) in cases {
            let err = decode(Some(raw), 1 << 20).unwrap_err().to_string();
            assert!(
                err.contains(reason),
                "{}: {err}",
                String::from_utf8_lossy(raw)
            );
        }
        assert!(matches!(decode(None, 10), Err(DecodeError::Empty)));
        assert!(matches!(
            decode(Some(&[b' '; 11]), 10),
            Err(DecodeError::TooLarge { size: 11, max: 10 })
        ));
    }
}
