//! Unit tests of `wire.rs`.

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

/// `{"k":{"k":...{}}}` with `depth` objects, the outermost included, as text (a `Value` that
/// deep could not be dropped without overflowing the stack).
fn nested(depth: usize) -> String {
    let opening = r#"{"k":"#.repeat(depth - 1);
    format!("{opening}{{}}{}", "}".repeat(depth - 1))
}

fn record_with_data(data: &str) -> Vec<u8> {
    format!(r#"{{"version":1,"orderingId":"o","scheduledTime":"2026-11-22T06:00:00Z","uniquenessKey":"u","taskData":{data}}}"#).into_bytes()
}

#[test]
fn task_data_nested_beyond_the_limit_is_refused_as_too_deep() {
    // 100 parses within serde_json's limit of 128, 200 does not; all are refused as too deep.
    for depth in [MAX_TASK_DATA_DEPTH + 1, 100, 200, 100_000] {
        let raw = record_with_data(&nested(depth));
        let error = decode_record(Some(&raw), usize::MAX).unwrap_err();
        assert_eq!(error.reason(), "too_deep", "depth {depth}: {error}");
        assert_eq!(
            error.to_string(),
            "taskData is nested deeper than 64 levels"
        );
    }
    let arrays = record_with_data(&format!(
        r#"{{"a":{}{}}}"#,
        "[".repeat(MAX_TASK_DATA_DEPTH),
        "]".repeat(MAX_TASK_DATA_DEPTH)
    ));
    let error = decode_record(Some(&arrays), usize::MAX).unwrap_err();
    assert_eq!(error.reason(), "too_deep", "arrays count too");
    let deepest = record_with_data(&nested(MAX_TASK_DATA_DEPTH));
    let task = decode(Some(&deepest), usize::MAX).unwrap();
    assert_eq!(
        check_task(&task),
        Ok(()),
        "what the decoder takes, the client takes"
    );
    // Brackets and braces inside strings do not count.
    let quoted = record_with_data(&format!(
        r#"{{"s":"{}\"{}"}}"#,
        "[".repeat(200),
        "{".repeat(200)
    ));
    assert!(decode(Some(&quoted), usize::MAX).is_ok());
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
fn integers_beyond_64_bits_are_refused_rather_than_rounded() {
    for literal in [
        "18446744073709551616",
        "-9223372036854775809",
        "123456789012345678901234567890",
    ] {
        let raw = record_with_data(&format!(r#"{{"a":[1,{{"n":{literal}}}]}}"#));
        let error = decode_record(Some(&raw), usize::MAX).unwrap_err();
        assert_eq!(error.reason(), "number", "{literal}: {error}");
        assert!(error.to_string().contains(literal), "{error}");
    }
    let huge = record_with_data(&format!(r#"{{"n":{}}}"#, "9".repeat(500_000)));
    let error = decode_record(Some(&huge), usize::MAX).unwrap_err();
    assert!(
        error
            .to_string()
            .ends_with("... (500000 digits), beyond the 64-bit range the node reads exactly"),
        "{error}"
    );
    // The edges of the 64-bit range, floats, and digits inside strings are fine.
    let raw = record_with_data(
        r#"{"a":18446744073709551615,"b":-9223372036854775808,"c":1.8446744073709552e19,"d":"18446744073709551616","e":[-0,0]}"#,
    );
    let task = decode(Some(&raw), usize::MAX).unwrap();
    assert_eq!(task.task_data["a"], json!(u64::MAX));
    assert_eq!(task.task_data["b"], json!(i64::MIN));
}

#[test]
fn keys_longer_than_cassandra_takes_are_refused_in_tasks_and_cancels() {
    let record = |kind: &str, ordering_id: &str, uniqueness_key: &str| {
        format!(r#"{{"version":1,"type":"{kind}","orderingId":"{ordering_id}","scheduledTime":"2026-11-22T06:00:00Z","uniquenessKey":"{uniqueness_key}"}}"#).into_bytes()
    };
    let long = "o".repeat(70_000);
    // Bytes, not characters: 513 two-byte characters are 1,026 bytes.
    let wide = "é".repeat(513);
    for kind in ["task", "cancel"] {
        for (raw, field, bytes) in [
            (record(kind, &long, "u"), "orderingId", 70_000),
            (record(kind, "o", &wide), "uniquenessKey", 1026),
        ] {
            let error = decode_record(Some(&raw), usize::MAX).unwrap_err();
            assert_eq!(error.reason(), "field_too_long", "{kind}: {error}");
            assert_eq!(
                error.to_string(),
                format!("{field} is {bytes} bytes, over the 1024-byte limit")
            );
        }
        let longest = record(kind, &"o".repeat(1024), &"u".repeat(1024));
        assert!(decode_record(Some(&longest), usize::MAX).is_ok(), "{kind}");
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

#[test]
fn a_typed_prioritised_task_has_the_documented_shape_and_defaults_are_not_written() {
    let typed = sample().of_type("send-email").with_priority(-3);
    let text = String::from_utf8(encode(&typed)).unwrap();
    assert_eq!(
        text,
        r#"{"version":1,"orderingId":"order-1","scheduledTime":"2026-11-22T06:00:00.000Z","uniquenessKey":"u-1","taskData":{"n":3,"to":"ops"},"taskType":"send-email","priority":-3}"#
    );
    assert_eq!(decode(Some(text.as_bytes()), 1 << 20).unwrap(), typed);
    // The defaults are not written: such a task is a record of the first release.
    let plain = sample().of_type(crate::DEFAULT_TASK_TYPE).with_priority(0);
    assert!(!String::from_utf8(encode(&plain))
        .unwrap()
        .contains("taskType"));
}

#[test]
fn a_record_without_type_or_priority_is_a_default_task() {
    let v1 = br#"{"version":1,"orderingId":"o","scheduledTime":"2026-11-22T06:00:00Z","uniquenessKey":"u"}"#;
    let task = decode(Some(v1), 1 << 20).unwrap();
    assert_eq!(task.task_type, "default");
    assert_eq!(task.priority, 0);
}

#[test]
fn task_types_outside_the_limits_are_refused_by_client_check_and_decoder_alike() {
    for bad in [
        "",
        "has space",
        "a=b",
        "é",
        &"x".repeat(MAX_TASK_TYPE_BYTES + 1),
    ] {
        let task = sample().of_type(bad);
        assert!(
            matches!(check_task(&task), Err(ContentError::BadTaskType(_))),
            "{bad:?}"
        );
        let raw = format!(
            r#"{{"version":1,"orderingId":"o","scheduledTime":"2026-11-22T06:00:00Z","uniquenessKey":"u","taskType":{}}}"#,
            serde_json::to_string(bad).unwrap()
        );
        let error = decode_record(Some(raw.as_bytes()), 1 << 20).unwrap_err();
        assert_eq!(error.reason(), "task_type", "{bad:?}: {error}");
    }
    for good in [
        "send-email",
        "billing.charge",
        "a",
        "v2:resize/thumb",
        &"x".repeat(MAX_TASK_TYPE_BYTES),
    ] {
        assert!(check_task(&sample().of_type(good)).is_ok(), "{good:?}");
    }
    let huge = br#"{"version":1,"orderingId":"o","scheduledTime":"2026-11-22T06:00:00Z","uniquenessKey":"u","priority":5000000000}"#;
    assert_eq!(
        decode_record(Some(huge), 1 << 20).unwrap_err().reason(),
        "json"
    );
}

#[test]
fn conflict_modes_and_identity_control_records_have_the_documented_shape() {
    let debounced = sample().on_conflict(crate::OnConflict::Debounce {
        max_wait: std::time::Duration::from_secs(30),
    });
    let text = String::from_utf8(encode(&debounced)).unwrap();
    assert_eq!(
        text,
        r#"{"version":1,"orderingId":"order-1","scheduledTime":"2026-11-22T06:00:00.000Z","uniquenessKey":"u-1","taskData":{"n":3,"to":"ops"},"onConflict":"debounce","maxWaitMs":30000}"#
    );
    assert_eq!(decode(Some(text.as_bytes()), 1 << 20).unwrap(), debounced);
    for mode in [
        crate::OnConflict::Replace,
        crate::OnConflict::KeepTime,
        crate::OnConflict::IfAbsent,
    ] {
        let task = sample().on_conflict(mode);
        assert_eq!(decode(Some(&encode(&task)), 1 << 20).unwrap(), task);
    }
    let identity = sample().identity();
    let cancel = encode_cancel_identity(&identity);
    assert_eq!(
        String::from_utf8(cancel.clone()).unwrap(),
        r#"{"version":1,"type":"cancel","orderingId":"order-1","uniquenessKey":"u-1"}"#
    );
    assert_eq!(
        decode_record(Some(&cancel), 1 << 20).unwrap(),
        Record::CancelIdentity(identity.clone())
    );
    let later = sample().scheduled_time + chrono::TimeDelta::hours(1);
    let reschedule = encode_reschedule(&identity, later);
    assert_eq!(
        String::from_utf8(reschedule.clone()).unwrap(),
        r#"{"version":1,"type":"reschedule","orderingId":"order-1","scheduledTime":"2026-11-22T07:00:00.000Z","uniquenessKey":"u-1"}"#
    );
    assert_eq!(
        decode_record(Some(&reschedule), 1 << 20).unwrap(),
        Record::Reschedule(identity, later)
    );
    for bad in [
        r#"{"version":1,"orderingId":"o","scheduledTime":"2026-11-22T06:00:00Z","uniquenessKey":"u","onConflict":"debounce"}"#,
        r#"{"version":1,"orderingId":"o","scheduledTime":"2026-11-22T06:00:00Z","uniquenessKey":"u","onConflict":"upsert"}"#,
    ] {
        let error = decode_record(Some(bad.as_bytes()), 1 << 20).unwrap_err();
        assert_eq!(error.reason(), "conflict", "{bad}: {error}");
    }
    let no_time = br#"{"version":1,"type":"reschedule","orderingId":"o","uniquenessKey":"u"}"#;
    assert_eq!(
        decode_record(Some(no_time), 1 << 20).unwrap_err().reason(),
        "missing_field"
    );
}

#[test]
fn group_members_and_joins_have_the_documented_shape_and_round_trip() {
    let member = sample().in_group(GroupMember::new("recon-x", 3).of(100).fail_fast());
    let text = String::from_utf8(encode(&member)).unwrap();
    assert_eq!(
        text,
        r#"{"version":1,"orderingId":"order-1","scheduledTime":"2026-11-22T06:00:00.000Z","uniquenessKey":"u-1","taskData":{"n":3,"to":"ops"},"group":{"id":"recon-x","index":3,"total":100,"failFast":true}}"#
    );
    assert_eq!(decode(Some(text.as_bytes()), 1 << 20).unwrap(), member);
    // Without a total and fail-fast, neither is written.
    let open = sample().in_group(GroupMember::new("recon-x", 1));
    let text = String::from_utf8(encode(&open)).unwrap();
    assert!(
        text.ends_with(r#""group":{"id":"recon-x","index":1}}"#),
        "{text}"
    );
    assert_eq!(decode(Some(text.as_bytes()), 1 << 20).unwrap(), open);
    let mut join = sample();
    join.join_of = Some("recon-x".into());
    let text = String::from_utf8(encode(&join)).unwrap();
    assert!(text.ends_with(r#""joinOf":"recon-x"}"#), "{text}");
    assert_eq!(decode(Some(text.as_bytes()), 1 << 20).unwrap(), join);
    let child = sample().in_group(GroupMember::new("children:ab", 2).of(2).joined_by("parent"));
    let text = String::from_utf8(encode(&child)).unwrap();
    assert!(
        text.ends_with(r#""group":{"id":"children:ab","index":2,"total":2,"joinType":"parent"}}"#),
        "{text}"
    );
    assert_eq!(decode(Some(text.as_bytes()), 1 << 20).unwrap(), child);
    // The stored form carries the same fields back.
    let traced =
        sample().with_trace_parent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    let limited = sample().with_limit_key("tenant-a");
    for task in [member, open, join, child, sample(), traced, limited] {
        let stored = encode_grouping(&task);
        let plain = Task {
            group: None,
            join_of: None,
            trace_parent: None,
            limit_key: None,
            ..task.clone()
        };
        assert_eq!(with_grouping(plain, stored.as_deref()).unwrap(), task);
    }
}

#[test]
fn a_limit_key_is_an_optional_field_that_round_trips_and_is_refused_empty_or_too_long() {
    let limited = sample().with_limit_key("tenant-ä");
    let text = String::from_utf8(encode(&limited)).unwrap();
    assert!(text.ends_with(r#""limitKey":"tenant-ä"}"#), "{text}");
    assert_eq!(decode(Some(text.as_bytes()), 1 << 20).unwrap(), limited);
    // A record without it (every earlier one) has none.
    let plain = decode(Some(&encode(&sample())), 1 << 20).unwrap();
    assert_eq!(plain.limit_key, None);
    let longest = "k".repeat(MAX_LIMIT_KEY_BYTES);
    check_task(&sample().with_limit_key(longest.as_str())).unwrap();
    for (key, bytes) in [(String::new(), 0), (format!("{longest}k"), 257)] {
        let task = sample().with_limit_key(key);
        let error = check_task(&task).unwrap_err();
        assert_eq!(error, ContentError::BadLimitKey(bytes));
        let decoded = decode(Some(&encode(&task)), 1 << 20).unwrap_err();
        assert_eq!(decoded.reason(), "limit_key");
        assert!(
            decoded.to_string().contains(&format!("{bytes} bytes")),
            "{decoded}"
        );
    }
}

#[test]
fn bad_groups_are_refused_by_client_check_and_decoder_alike() {
    let long = "g".repeat(MAX_GROUP_ID_BYTES + 1);
    for (member, why) in [
        (GroupMember::new("", 1), "id is 0 bytes"),
        (GroupMember::new(long.as_str(), 1), "id is 1025 bytes"),
        (GroupMember::new("g", 0), "index must be 1 or more"),
        (GroupMember::new("g", 1).of(0), "total must be 1 or more"),
        (
            GroupMember::new("g", 4).of(3),
            "index 4 is above the total 3",
        ),
    ] {
        let task = sample().in_group(member);
        let error = check_task(&task).unwrap_err();
        assert!(error.to_string().contains(why), "{error}");
        let decoded = decode(Some(&encode(&task)), 1 << 20).unwrap_err();
        assert_eq!(decoded.reason(), "group");
        assert!(decoded.to_string().contains(why), "{decoded}");
    }
}

#[test]
fn a_group_member_with_a_conflict_mode_is_refused_but_a_join_is_not() {
    let member = sample()
        .in_group(GroupMember::new("g", 1).of(1))
        .on_conflict(crate::OnConflict::IfAbsent);
    let error = check_task(&member).unwrap_err();
    assert!(error.to_string().contains("onConflict"), "{error}");
    let decoded = decode(Some(&encode(&member)), 1 << 20).unwrap_err();
    assert_eq!(decoded.reason(), "group");
    let mut join = member.clone();
    join.join_of = Some("child-group".into());
    check_task(&join).unwrap();
    assert_eq!(decode(Some(&encode(&join)), 1 << 20).unwrap(), join);
}

/// A member's number and the total are at most the largest group's (10,000), well within the
/// group table's CQL `int` columns, which Cassandra refuses past `i32::MAX` on every retry: a
/// member beyond them ran, then never finished, and its orderingId stalled (issue 30, defects 6
/// and 9).
#[test]
fn group_numbers_past_the_largest_group_are_refused_by_client_check_and_decoder_alike() {
    let over = MAX_GROUP_NUMBER + 1;
    for (member, why) in [
        (GroupMember::new("g", over), "index 10001 is over 10000"),
        (
            GroupMember::new("g", 1).of(over),
            "total 10001 is over 10000",
        ),
        (
            GroupMember::new("g", u32::MAX).of(u32::MAX),
            "index 4294967295 is over 10000",
        ),
    ] {
        let task = sample().in_group(member);
        let error = check_task(&task).unwrap_err();
        assert!(error.to_string().contains(why), "{error}");
        let decoded = decode(Some(&encode(&task)), 1 << 20).unwrap_err();
        assert_eq!(decoded.reason(), "group", "{decoded}");
        assert!(decoded.to_string().contains(why), "{decoded}");
    }
    let largest = sample().in_group(GroupMember::new("g", MAX_GROUP_NUMBER).of(MAX_GROUP_NUMBER));
    check_task(&largest).unwrap();
    assert_eq!(decode(Some(&encode(&largest)), 1 << 20).unwrap(), largest);
}

/// A debounce adds its wait to a time: a wait past the span of the times the engine holds could
/// only overflow that sum (a panic), never cap a time.
#[test]
fn a_debounce_wait_longer_than_the_engines_span_of_times_is_refused() {
    let debounced = |ms: u64| {
        sample().on_conflict(crate::OnConflict::Debounce {
            max_wait: std::time::Duration::from_millis(ms),
        })
    };
    // 1900-01-01T00:00:00.000Z to 9999-12-31T23:59:59.999Z.
    let longest = 255_611_289_599_999;
    for ms in [longest + 1, u64::MAX] {
        let task = debounced(ms);
        let error = check_task(&task).unwrap_err();
        assert!(error.to_string().contains("maxWaitMs"), "{error}");
        let decoded = decode(Some(&encode(&task)), 1 << 20).unwrap_err();
        assert_eq!(decoded.reason(), "conflict", "{decoded}");
    }
    let task = debounced(longest);
    check_task(&task).unwrap();
    assert_eq!(decode(Some(&encode(&task)), 1 << 20).unwrap(), task);
}

/// Every time a record carries is one the wire format can write back (UTC, years 0000-9999)
/// and the engine loads (from 1900): in tasks, cancellations and reschedules alike.
#[test]
fn times_outside_the_engines_range_are_refused_in_every_record() {
    let record = |kind: &str, time: &str| {
        format!(r#"{{"version":1,"type":"{kind}","orderingId":"o","scheduledTime":"{time}","uniquenessKey":"u"}}"#)
            .into_bytes()
    };
    for kind in ["task", "cancel", "reschedule"] {
        for time in [
            "9999-12-31T23:59:59.999-00:01",
            "9999-12-31T23:59:60Z",
            "1899-12-31T23:59:59.999Z",
            "0000-01-01T00:00:00Z",
        ] {
            let error = decode_record(Some(&record(kind, time)), usize::MAX).unwrap_err();
            assert_eq!(error.reason(), "bad_time", "{kind} {time}: {error}");
            assert!(error.to_string().contains(time), "{error}");
        }
        for (time, kept) in [
            ("9999-12-31T23:59:59.999999Z", "9999-12-31T23:59:59.999Z"),
            ("1900-01-01T01:00:00+01:00", "1900-01-01T00:00:00.000Z"),
        ] {
            let decoded = decode_record(Some(&record(kind, time)), usize::MAX).unwrap();
            let at = match decoded {
                Record::Task(task) => task.scheduled_time,
                Record::Cancel(key) => key.scheduled_time,
                Record::Reschedule(_, to) => to,
                Record::CancelIdentity(_) => panic!("a cancel by identity has no time"),
            };
            assert_eq!(format_time(at), kept, "{kind} {time}");
        }
    }
}
