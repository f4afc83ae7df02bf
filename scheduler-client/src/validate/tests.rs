//! Unit tests of `validate.rs`.

use super::*;
use chrono::TimeZone;

#[test]
fn times_the_wire_format_cannot_carry_are_refused() {
    let last = wire::latest_time();
    let ok = Task::new("o", last, "u", Default::default());
    assert!(validate(&ok, Utc::now(), Duration::from_secs(10)).is_ok());
    let beyond = Task::new(
        "o",
        last + TimeDelta::milliseconds(1),
        "u",
        Default::default(),
    );
    let error = validate(&beyond, Utc::now(), Duration::from_secs(10)).unwrap_err();
    assert!(
        matches!(error, ScheduleError::BeyondWireFormat(_)),
        "{error}"
    );
    let encoded = wire::encode(&ok);
    assert_eq!(wire::decode(Some(&encoded), usize::MAX).unwrap(), ok);
}

#[test]
fn task_data_the_node_cannot_parse_is_refused() {
    let nested = |depth: usize| {
        (1..depth).fold(
            serde_json::json!({}),
            |inner, _| serde_json::json!({ "k": inner }),
        )
    };
    let now = Utc::now();
    let grace = Duration::from_secs(10);
    let mut task = Task::new("o", now, "u", Default::default());
    // taskData itself is level 1.
    task.task_data
        .insert("k".into(), nested(wire::MAX_TASK_DATA_DEPTH - 1));
    assert!(validate(&task, now, grace).is_ok());
    task.task_data
        .insert("k".into(), nested(wire::MAX_TASK_DATA_DEPTH));
    assert!(matches!(
        validate(&task, now, grace),
        Err(ScheduleError::Content(ContentError::TaskDataTooDeep {
            max: 64
        }))
    ));
    task.task_data.insert("k".into(), nested(199));
    let error =
        validate(&task, now, grace).expect_err("the node's decoder cannot parse taskData 200 deep");
    assert_eq!(
        error.to_string(),
        "taskData is nested deeper than 64 levels"
    );
    assert!(!error.is_retryable());
    assert!(error.is_rejection());
}

#[test]
fn keys_longer_than_cassandra_takes_are_refused() {
    let now = Utc::now();
    let grace = Duration::from_secs(10);
    let task = |ordering_id: &str, uniqueness_key: &str| {
        Task::new(ordering_id, now, uniqueness_key, Default::default())
    };
    let error = validate(&task(&"o".repeat(70_000), "u"), now, grace).unwrap_err();
    assert_eq!(
        error.to_string(),
        "orderingId is 70000 bytes, over the 1024-byte limit"
    );
    let error = validate(&task("o", &"u".repeat(1025)), now, grace).unwrap_err();
    assert_eq!(
        error.to_string(),
        "uniquenessKey is 1025 bytes, over the 1024-byte limit"
    );
    let longest = task(&"o".repeat(1024), &"u".repeat(1024));
    assert!(validate(&longest, now, grace).is_ok());
}

#[test]
fn validation_names_the_problem() {
    let now = Utc.timestamp_opt(1_800_000_000, 0).single().unwrap();
    let grace = Duration::from_secs(20);
    let at = |secs_ago: i64| {
        Task::new(
            "o",
            now - TimeDelta::seconds(secs_ago),
            "u",
            Default::default(),
        )
    };
    assert!(
        validate(&at(10), now, grace).is_ok(),
        "10 s late is within a 20 s grace window"
    );
    assert!(
        validate(&at(-3600), now, grace).is_ok(),
        "future tasks are fine"
    );
    let err = validate(&at(30), now, grace).unwrap_err().to_string();
    assert_eq!(err, "scheduledTime 2027-01-15T07:59:30.000Z is 30000 ms in the past, beyond the 20000 ms grace window");
    let mut no_id = at(0);
    no_id.ordering_id.clear();
    assert!(matches!(
        validate(&no_id, now, grace),
        Err(ScheduleError::EmptyOrderingId)
    ));
    let mut no_key = at(0);
    no_key.uniqueness_key.clear();
    assert!(matches!(
        validate(&no_key, now, grace),
        Err(ScheduleError::EmptyUniquenessKey)
    ));
}

/// The client refuses a group number past the largest group's, before sending: the node would
/// park it (issue 30, defects 6 and 9).
#[test]
fn a_group_index_or_total_past_the_largest_group_is_refused_before_sending() {
    let max = crate::wire::MAX_GROUP_NUMBER;
    let over = max + 1;
    let due = Utc::now() + TimeDelta::minutes(5);
    for member in [
        crate::GroupMember::new("g", over),
        crate::GroupMember::new("g", 1).of(over),
    ] {
        let task = Task::new("o", due, "u", Default::default()).in_group(member);
        let error = validate(&task, Utc::now(), Duration::from_secs(10)).unwrap_err();
        assert!(
            matches!(error, ScheduleError::Content(ContentError::BadGroup(_))),
            "{error}"
        );
        assert!(error.is_rejection());
    }
    let largest = crate::GroupMember::new("g", max).of(max);
    let task = Task::new("o", due, "u", Default::default()).in_group(largest);
    assert!(validate(&task, Utc::now(), Duration::from_secs(10)).is_ok());
}
