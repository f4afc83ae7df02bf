//! Property tests of the wire decoder: whatever a record holds, decoding returns a task, a
//! cancellation or an error with a reason; it never panics. Valid tasks survive a round trip, and
//! the client's validation and the decoder accept and refuse the same tasks.

use chrono::DateTime;
use proptest::prelude::*;
use scheduler_client::wire::{
    check_key, check_task, decode_record, encode, encode_cancel, Record, MAX_ORDERING_ID_BYTES,
    MAX_TASK_DATA_DEPTH, MAX_UNIQUENESS_KEY_BYTES,
};
use scheduler_client::{validate, GroupMember, Task};
use serde_json::{json, Map, Value};
use std::time::Duration;

const MAX: usize = 64 * 1024;

/// Any JSON value, nested a few levels, with numbers at the edges.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        any::<String>().prop_map(Value::String),
        time_text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(any::<String>(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Strings that look like times, including ones at and past chrono's range.
fn time_text() -> impl Strategy<Value = String> {
    prop_oneof![
        (
            -300_000i64..300_000,
            0u32..13,
            0u32..32,
            0u32..25,
            0u32..61,
            0u32..1000
        )
            .prop_map(|(y, mo, d, h, mi, ms)| format!(
                "{y:+07}-{mo:02}-{d:02}T{h:02}:{mi:02}:{mi:02}.{ms:03}Z"
            )),
        Just("+262143-12-31T23:59:59.999Z".to_string()),
        Just("-262143-01-01T00:00:00Z".to_string()),
        Just("2026-11-22T08:00:00+99:99".to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
    ]
}

/// Records shaped like tasks, with each field present, absent or of any type.
fn task_like() -> impl Strategy<Value = Vec<u8>> {
    let field = |name: &'static str| {
        prop_oneof![Just(None), json_value().prop_map(move |v| Some((name, v))),]
    };
    (
        prop_oneof![Just(Some(("version", json!(1)))), field("version")],
        prop_oneof![
            Just(None),
            Just(Some(("type", json!("cancel")))),
            field("type")
        ],
        field("orderingId"),
        prop_oneof![
            time_text().prop_map(|t| Some(("scheduledTime", json!(t)))),
            field("scheduledTime")
        ],
        field("uniquenessKey"),
        field("taskData"),
    )
        .prop_map(|(a, b, c, d, e, f)| {
            let object: Map<String, Value> = [a, b, c, d, e, f]
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
            serde_json::to_vec(&Value::Object(object)).unwrap_or_default()
        })
}

fn check(bytes: &[u8]) {
    match decode_record(Some(bytes), MAX) {
        Ok(Record::Task(task)) => {
            // Whatever the node takes, the client's own check takes too.
            assert_eq!(check_task(&task), Ok(()));
            assert_eq!(task.scheduled_time.timestamp_subsec_nanos() % 1_000_000, 0);
        }
        Ok(Record::Cancel(key)) => {
            assert_eq!(check_key(&key.ordering_id, &key.uniqueness_key), Ok(()))
        }
        Ok(Record::CancelIdentity(identity)) | Ok(Record::Reschedule(identity, _)) => {
            assert_eq!(
                check_key(&identity.ordering_id, &identity.uniqueness_key),
                Ok(())
            )
        }
        Err(e) => assert!(!e.reason().is_empty()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        check(&bytes);
    }

    #[test]
    fn task_shaped_records_never_panic(bytes in task_like()) {
        check(&bytes);
    }

    #[test]
    fn valid_tasks_survive_a_round_trip(
        ordering_id in ".{1,40}",
        uniqueness_key in ".{1,40}",
        // 1900 to 9999: the times the engine holds (RFC 3339 carries none later).
        millis in -2_208_988_800_000i64..=253_402_300_799_999,
        data in prop::collection::btree_map("[a-z]{1,8}", json_value(), 0..4),
    ) {
        let Some(time) = DateTime::from_timestamp_millis(millis) else {
            return Ok(());
        };
        let task = Task::new(ordering_id, time, uniqueness_key, data.into_iter().collect());
        prop_assert_eq!(decode_record(Some(&encode(&task)), usize::MAX).ok(), Some(Record::Task(task)));
    }
}

/// Any number a `Value` holds: floats of every class and of random bits (mostly 17 digits).
fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<f64>().prop_map(|f| json!(f)),
        any::<u64>().prop_map(|bits| json!(f64::from_bits(bits))),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5000))]

    #[test]
    fn numbers_arrive_exactly(n in number()) {
        let time = DateTime::from_timestamp_millis(1_795_327_200_000).unwrap_or_default();
        let data = json!({ "n": n.clone(), "deeper": [{ "n": n.clone() }] });
        let task = Task::new("o", time, "u", data.as_object().cloned().unwrap_or_default());
        let Ok(Record::Task(back)) = decode_record(Some(&encode(&task)), usize::MAX) else {
            return Err(TestCaseError::fail(format!("{n} was not decoded")));
        };
        // Equal, and with the same digits and kind (integer or float).
        prop_assert_eq!(back.task_data["n"].to_string(), n.to_string());
        prop_assert_eq!(back, task);
    }

    /// An integer a producer writes arrives as that integer, or the record is refused.
    #[test]
    fn integers_arrive_exactly_or_not_at_all(literal in "-?[1-9][0-9]{0,24}") {
        let raw = format!(
            r#"{{"version":1,"orderingId":"o","scheduledTime":"2026-11-22T06:00:00Z","uniquenessKey":"u","taskData":{{"n":[{literal}]}}}}"#
        );
        let exact = literal
            .parse::<i64>()
            .map(Value::from)
            .or_else(|_| literal.parse::<u64>().map(Value::from))
            .ok();
        match (decode_record(Some(raw.as_bytes()), MAX), exact) {
            (Ok(Record::Task(task)), Some(n)) => prop_assert_eq!(&task.task_data["n"][0], &n),
            (Err(error), None) => prop_assert_eq!(error.reason(), "number"),
            (other, exact) => {
                return Err(TestCaseError::fail(format!("{literal}: {other:?}, exact {exact:?}")))
            }
        }
    }
}

/// taskData nested `levels.len() + 1` deep: under the taskData object, one object (false) or
/// array (true) per level.
fn nested_data(levels: &[bool]) -> Map<String, Value> {
    let inner = levels.iter().rev().fold(json!(1), |inner, &array| {
        if array {
            json!([0, inner])
        } else {
            json!({ "k": inner })
        }
    });
    [("k".to_string(), inner)].into_iter().collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// What the client accepts, the node runs; what the client refuses, the node refuses too.
    #[test]
    fn client_and_node_agree_on_nesting(levels in prop::collection::vec(any::<bool>(), 0..140)) {
        let time = DateTime::from_timestamp_millis(1_795_327_200_000).unwrap_or_default();
        let task = Task::new("o", time, "u", nested_data(&levels));
        let accepted = validate(&task, time, Duration::ZERO).is_ok();
        prop_assert_eq!(accepted, levels.len() < MAX_TASK_DATA_DEPTH);
        let decoded = decode_record(Some(&encode(&task)), usize::MAX);
        match decoded {
            Ok(record) => {
                prop_assert!(accepted);
                prop_assert_eq!(record, Record::Task(task));
            }
            Err(error) => {
                prop_assert!(!accepted);
                prop_assert_eq!(error.reason(), "too_deep");
            }
        }
    }
}

/// Keys of any characters, and ASCII keys around the limit.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::collection::vec(any::<char>(), 1..500).prop_map(String::from_iter),
        (1000usize..1050).prop_map(|n| "k".repeat(n)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// The client and the node refuse the same keys, in tasks and in cancellations.
    #[test]
    fn client_and_node_agree_on_key_lengths(ordering_id in key(), uniqueness_key in key()) {
        let time = DateTime::from_timestamp_millis(1_795_327_200_000).unwrap_or_default();
        let fits = ordering_id.len() <= MAX_ORDERING_ID_BYTES
            && uniqueness_key.len() <= MAX_UNIQUENESS_KEY_BYTES;
        let task = Task::new(ordering_id, time, uniqueness_key, Map::new());
        prop_assert_eq!(validate(&task, time, Duration::ZERO).is_ok(), fits);
        let key = task.key();
        for (decoded, expected) in [
            (decode_record(Some(&encode(&task)), MAX), Record::Task(task)),
            (decode_record(Some(&encode_cancel(&key)), MAX), Record::Cancel(key)),
        ] {
            match decoded {
                Ok(record) => {
                    prop_assert!(fits);
                    prop_assert_eq!(record, expected);
                }
                Err(error) => {
                    prop_assert!(!fits);
                    prop_assert_eq!(error.reason(), "field_too_long");
                }
            }
        }
    }
}

/// Group numbers around the edges: 0, 1, the largest group, the group table's `int` limit and
/// `u32::MAX`.
fn group_number() -> impl Strategy<Value = u32> {
    let limit = scheduler_client::wire::MAX_GROUP_NUMBER;
    let int = i32::MAX as u32;
    prop_oneof![
        0u32..4,
        (limit - 2)..=(limit + 2),
        (int - 2)..=(int + 2),
        (u32::MAX - 2)..=u32::MAX,
        any::<u32>()
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// The client and the node refuse the same group numbers: from 1, at most the total, and
    /// at most the largest group (within the group table's `int` columns, which Cassandra
    /// refuses past on every retry).
    #[test]
    fn client_and_node_agree_on_group_numbers(
        index in group_number(),
        total in prop::option::of(group_number()),
    ) {
        let time = DateTime::from_timestamp_millis(1_795_327_200_000).unwrap_or_default();
        let limit = scheduler_client::wire::MAX_GROUP_NUMBER;
        let fits = (1..=limit).contains(&index)
            && total.is_none_or(|total| (index..=limit).contains(&total));
        let mut member = GroupMember::new("g", index);
        member.total = total;
        let task = Task::new("o", time, "u", Map::new()).in_group(member);
        prop_assert_eq!(validate(&task, time, Duration::ZERO).is_ok(), fits);
        match decode_record(Some(&encode(&task)), MAX) {
            Ok(record) => {
                prop_assert!(fits);
                prop_assert_eq!(record, Record::Task(task));
            }
            Err(error) => {
                prop_assert!(!fits);
                prop_assert_eq!(error.reason(), "group");
            }
        }
    }
}

#[test]
fn oversized_and_non_utf8_records_are_refused_with_their_reason() {
    let big = vec![b' '; MAX + 1];
    let error = decode_record(Some(&big), MAX).expect_err("too large");
    assert_eq!(error.reason(), "too_large");
    let error = decode_record(Some(b"{\"version\":1,\"orderingId\":\"\xff\xfe\"}"), MAX)
        .expect_err("not UTF-8");
    assert_eq!(error.reason(), "json");
}
