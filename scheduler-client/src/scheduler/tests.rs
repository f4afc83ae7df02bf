//! Unit tests of `scheduler.rs`.

use super::*;
use chrono::TimeZone;
use rdkafka::types::RDKafkaErrorCode;

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

#[tokio::test]
async fn rejected_requests_are_counted_without_reaching_kafka() {
    // Nothing listens on this port; validation fails before any request is sent.
    let scheduler = Scheduler::new(SchedulerConfig::new("127.0.0.1:1", "t")).unwrap();
    let late = Task::new(
        "o",
        Utc::now() - TimeDelta::seconds(60),
        "u",
        Default::default(),
    );
    assert!(matches!(
        scheduler.schedule_task(late).await,
        Err(ScheduleError::TooFarInThePast { .. })
    ));
    let mut no_key = Task::new("o", Utc::now(), "u", Default::default()).key();
    no_key.uniqueness_key.clear();
    assert!(scheduler.cancel_task(&no_key).await.is_err());
    let text = scheduler.metrics();
    assert!(
        text.contains(
            "scheduler_client_requests_total{operation=\"schedule\",result=\"rejected\"} 1"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "scheduler_client_requests_total{operation=\"cancel\",result=\"rejected\"} 1"
        ),
        "{text}"
    );
    assert!(
        !text.contains("scheduler_client_request_duration_seconds_count"),
        "nothing was sent: {text}"
    );
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

#[tokio::test]
async fn cancelling_with_too_long_a_key_is_refused_before_kafka() {
    let mut config = SchedulerConfig::new("127.0.0.1:1", "t");
    // Without validation, the metadata request fails after this long, with another error.
    config.delivery_timeout = Duration::from_secs(1);
    let scheduler = Scheduler::new(config).unwrap();
    let mut key = Task::new("o", Utc::now(), "u", Default::default()).key();
    key.uniqueness_key = "u".repeat(70_000);
    let error = scheduler.cancel_task(&key).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "uniquenessKey is 70000 bytes, over the 1024-byte limit"
    );
    assert!(!error.is_retryable());
    let text = scheduler.metrics();
    assert!(
        text.contains(
            "scheduler_client_requests_total{operation=\"cancel\",result=\"rejected\"} 1"
        ),
        "{text}"
    );
    assert!(
        !text.contains("scheduler_client_request_duration_seconds_count"),
        "nothing was sent: {text}"
    );
}

#[test]
fn only_kafka_and_topic_errors_are_retryable() {
    let invalid = [
        ScheduleError::EmptyOrderingId,
        ScheduleError::EmptyUniquenessKey,
        ScheduleError::BeyondWireFormat("x".into()),
        ScheduleError::TooLarge { size: 2, max: 1 },
        ScheduleError::Content(ContentError::TaskDataTooDeep { max: 64 }),
        ScheduleError::Content(ContentError::FieldTooLong {
            field: "orderingId",
            bytes: 2000,
            max: 1024,
        }),
    ];
    for error in invalid {
        assert!(!error.is_retryable() && error.is_rejection(), "{error}");
    }
    let down = KafkaError::MessageProduction(RDKafkaErrorCode::BrokerTransportFailure);
    assert!(ScheduleError::Kafka(down).is_retryable());
    assert!(ScheduleError::Unacknowledged(Duration::from_secs(30)).is_retryable());
    let topic = ScheduleError::Topic {
        topic: "t".into(),
        source: TopicError::Missing,
    };
    assert!(topic.is_retryable() && !topic.is_rejection());
    let config = ScheduleError::Config(KafkaError::ClientCreation("bad".into()));
    assert!(!config.is_retryable() && !config.is_rejection());
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
