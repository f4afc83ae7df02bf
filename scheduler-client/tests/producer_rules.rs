//! The rules every producer applies, as one table (`producer_rules.json`): here through the
//! node's decoder, through the path of the `scheduler` command and HTTP enqueue (the decoder,
//! then the client's `validate`), and through the Rust API (the same task built by hand, where
//! the API can express it, then `validate`). HTTP enqueue's own test (scheduler-core,
//! `admin::enqueue`) and the Python producer's (it-tests, `python_producer.rs`) read the same
//! table.

#[path = "producer_rules/cases.rs"]
mod cases;

use std::time::Duration;

use chrono::{DateTime, Utc};
use scheduler_client::wire::{self, DecodeError};
use scheduler_client::{defaults, validate, GroupMember, OnConflict, Task, TaskData};
use serde_json::Value;

use cases::producer_rule_cases;

#[test]
fn the_decoder_and_the_clients_validation_refuse_exactly_the_tables_invalid_tasks() {
    let now = Utc::now();
    let (grace, cases) = producer_rule_cases(now);
    assert_eq!(
        grace,
        defaults::SCHEDULING_GRACE_WINDOW,
        "the table assumes the default grace window"
    );
    let mut wrong = Vec::new();
    for case in &cases {
        let name = &case.name;
        assert!(
            case.decoder_accept || !case.producers_accept,
            "{name}: no producer may send what the decoder refuses"
        );
        let decoded = wire::decode(Some(case.record.as_bytes()), defaults::MAX_TASK_BYTES);
        match (&decoded, case.decoder_accept) {
            (Ok(_), true) => {}
            (Err(e), false) => {
                if let Some(reason) = &case.reason {
                    if e.reason() != reason {
                        wrong.push(format!(
                            "{name}: the decoder parks it as {}, not {reason}: {e}",
                            e.reason()
                        ));
                    }
                }
            }
            (Ok(task), false) => wrong.push(format!("{name}: the decoder takes it: {task:?}")),
            (Err(e), true) => wrong.push(format!("{name}: the decoder refuses it: {e}")),
        }
        // The `scheduler` command and HTTP enqueue: the decoder, then the client's rules.
        let sent = match &decoded {
            Ok(task) => validate(task, now, grace)
                .map(|()| wire::encode(task).len() <= defaults::MAX_TASK_BYTES)
                .unwrap_or(false),
            Err(_) => false,
        };
        if sent != case.producers_accept {
            wrong.push(format!(
                "{name}: decoded and validated, it is {}",
                if sent { "sent" } else { "refused" }
            ));
        }
        // The Rust API, where it can express the record (a `Value` cannot hold an integer
        // beyond 64 bits, nor a `DateTime` a time that does not parse).
        if matches!(decoded, Err(DecodeError::IntegerOutOfRange(_))) {
            continue;
        }
        let record: Value = serde_json::from_str(&case.record).expect("a JSON record");
        if let Some(task) = by_hand(&record) {
            let accepted = validate(&task, now, grace).is_ok();
            if accepted != case.producers_accept {
                wrong.push(format!(
                    "{name}: built with the API, validate {} it",
                    if accepted { "takes" } else { "refuses" }
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} cases:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );
}

/// The task `record` describes, built with the client's API without any check; `None` when
/// the API cannot express it (a field of another JSON type, a number out of its type's range,
/// a time that does not parse, an unknown conflict mode).
fn by_hand(record: &Value) -> Option<Task> {
    if record.get("version")? != 1 {
        return None;
    }
    let text = |key: &str| record.get(key).and_then(Value::as_str);
    let time = DateTime::parse_from_rfc3339(text("scheduledTime")?).ok()?;
    let data = match record.get("taskData") {
        None | Some(Value::Null) => TaskData::new(),
        Some(Value::Object(map)) => map.clone(),
        Some(_) => return None,
    };
    let mut task = Task::new(
        text("orderingId")?,
        time.with_timezone(&Utc),
        text("uniquenessKey")?,
        data,
    );
    if record.get("taskType").is_some() {
        task = task.of_type(text("taskType")?);
    }
    if let Some(priority) = record.get("priority") {
        task = task.with_priority(i32::try_from(priority.as_i64()?).ok()?);
    }
    if record.get("onConflict").is_some() {
        let wait = match record.get("maxWaitMs") {
            None => None,
            Some(ms) => Some(Duration::from_millis(ms.as_u64()?)),
        };
        task = task.on_conflict(OnConflict::from_parts(text("onConflict")?, wait)?);
    }
    if let Some(group) = record.get("group") {
        let number = |key: &str| u32::try_from(group.get(key)?.as_u64()?).ok();
        let mut member = GroupMember::new(group.get("id")?.as_str()?, number("index")?);
        if !group.get("total").unwrap_or(&Value::Null).is_null() {
            member = member.of(number("total")?);
        }
        if let Some(fail_fast) = group.get("failFast") {
            if fail_fast.as_bool()? {
                member = member.fail_fast();
            }
        }
        if let Some(join_type) = group.get("joinType") {
            member = member.joined_by(join_type.as_str()?);
        }
        task = task.in_group(member);
    }
    if record.get("limitKey").is_some() {
        task = task.with_limit_key(text("limitKey")?);
    }
    Some(task)
}
