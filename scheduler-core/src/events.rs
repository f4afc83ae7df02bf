//! Completion events: with `[kafka] events_topic` set, each final outcome of a task (completed,
//! failed after its last retry, dropped) is published to that topic, keyed by `orderingId`, once
//! the status is stored:
//!
//! ```json
//! {"version":1,"type":"task-finished","orderingId":"...","scheduledTime":"...","uniquenessKey":"...",
//!  "outcome":"completed","attempts":1,"finishedAt":"..."}
//! ```
//!
//! Delivery is best effort on top of the producer's own retries (`acks=all`, idempotent): an event
//! that still cannot be delivered is logged, and the task's status stays readable through the admin
//! API. Consumers should treat events as at-least-once (a task re-run after a crash may finish twice).

use std::time::Duration;

use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use scheduler_client::{defaults, wire, TaskKey};
use tracing::warn;

use crate::hooks::TaskHook;
use crate::settings::KafkaSettings;
use crate::store::StatusRecord;

/// Publishes completion events on the node's runtime.
#[derive(Clone)]
pub struct EventPublisher {
    producer: FutureProducer,
    topic: String,
    runtime: tokio::runtime::Handle,
}

impl EventPublisher {
    /// A publisher to `topic` with the node's Kafka settings.
    pub fn new(
        kafka: &KafkaSettings,
        topic: &str,
        runtime: tokio::runtime::Handle,
    ) -> Result<Self, rdkafka::error::KafkaError> {
        let [acks, idempotence] = defaults::DURABLE_PRODUCER;
        let producer = kafka
            .client_config(&[
                acks,
                idempotence,
                // Keyed like the scheduler's own topic (Kafka's murmur2 partitioner).
                ("partitioner", "murmur2_random"),
            ])
            .create()?;
        Ok(EventPublisher {
            producer,
            topic: topic.to_string(),
            runtime,
        })
    }

    /// Publishes the final outcome of the task with `key` (without waiting for delivery).
    pub fn task_finished(&self, key: &TaskKey, record: &StatusRecord) {
        let payload = event_json(key, record);
        let producer = self.producer.clone();
        let topic = self.topic.clone();
        let ordering_id = key.ordering_id.clone();
        let task = key.to_string();
        self.runtime.spawn(async move {
            let sent = producer
                .send(
                    FutureRecord::to(&topic).key(&ordering_id).payload(&payload),
                    Timeout::After(Duration::from_secs(30)),
                )
                .await;
            if let Err((e, _)) = sent {
                warn!(%task, %topic, error = %e, "completion event not delivered");
            }
        });
    }
}

/// The event's JSON.
pub fn event_json(key: &TaskKey, record: &StatusRecord) -> String {
    serde_json::json!({
        "version": 1,
        "type": "task-finished",
        "orderingId": key.ordering_id,
        "scheduledTime": wire::format_time(key.scheduled_time),
        "uniquenessKey": key.uniqueness_key,
        "outcome": record.status.as_str(),
        "attempts": record.attempts,
        "finishedAt": wire::format_time(record.updated_at),
    })
    .to_string()
}

/// Completion events attached to a task's life ([`crate::hooks`]): published once the final
/// status is stored, so that no event announces an unrecorded outcome.
impl TaskHook for EventPublisher {
    fn finished(&self, key: &TaskKey, record: &StatusRecord) {
        self.task_finished(key, record);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::TaskStatus;
    use chrono::{TimeZone, Utc};

    #[test]
    fn events_carry_the_key_outcome_and_attempts() {
        let at = Utc
            .timestamp_millis_opt(1_795_327_200_000)
            .single()
            .unwrap();
        let key = TaskKey {
            scheduled_time: at,
            ordering_id: "o".into(),
            uniqueness_key: "u".into(),
        };
        let record = StatusRecord {
            status: TaskStatus::Failed,
            attempts: 3,
            updated_at: at,
            last_error: Some("boom".into()),
            result: None,
            started_at: None,
        };
        assert_eq!(
            event_json(&key, &record),
            r#"{"attempts":3,"finishedAt":"2026-11-22T06:00:00.000Z","orderingId":"o","outcome":"failed","scheduledTime":"2026-11-22T06:00:00.000Z","type":"task-finished","uniquenessKey":"u","version":1}"#
        );
    }
}
