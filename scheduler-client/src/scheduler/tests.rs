//! Unit tests of `scheduler.rs`.

use super::*;
use crate::wire::ContentError;
use chrono::TimeDelta;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

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
