//! What `Scheduler::schedule_task` checks before sending anything ([`validate`]), and why
//! scheduling fails ([`ScheduleError`]). Without the `producer` feature, the checks are what is
//! left: the node's testing kit refuses what the producer refuses, with the same errors.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
#[cfg(feature = "producer")]
use rdkafka::error::KafkaError;

use crate::task::Task;
use crate::wire::{self, ContentError};

/// Without the `producer` feature nothing is sent to Kafka, so nothing fails there: the variants
/// that carry a Kafka error cannot be built, and a `match` naming them compiles either way.
#[cfg(not(feature = "producer"))]
type KafkaError = std::convert::Infallible;

/// Why a task was not scheduled. Only [`ScheduleError::Kafka`], [`ScheduleError::Unacknowledged`]
/// and [`ScheduleError::Topic`] can succeed on retry ([`ScheduleError::is_retryable`]); the others
/// describe the task ([`ScheduleError::is_rejection`]) or the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// `orderingId` is empty.
    #[error("the task's orderingId is empty")]
    EmptyOrderingId,
    /// `uniquenessKey` is empty.
    #[error("the task's uniquenessKey is empty")]
    EmptyUniquenessKey,
    /// The task is due further in the past than the grace window allows.
    #[error("scheduledTime {scheduled_time} is {late_by_ms} ms in the past, beyond the {grace_ms} ms grace window")]
    TooFarInThePast {
        /// The task's time.
        scheduled_time: String,
        /// How far in the past it is.
        late_by_ms: i64,
        /// The grace window.
        grace_ms: u128,
    },
    /// The encoded task is larger than allowed.
    #[error("the encoded task is {size} bytes, over the {max}-byte limit")]
    TooLarge {
        /// Encoded size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The producer could not be created (bad properties).
    #[error("invalid Kafka producer configuration: {0}")]
    Config(#[source] KafkaError),
    /// The topic's partition count could not be read.
    #[error("cannot read the partitions of topic {topic}: {source}")]
    Topic {
        /// The topic.
        topic: String,
        /// What failed.
        #[source]
        source: TopicError,
    },
    /// The scheduled time is after 9999-12-31T23:59:59.999Z, the last time the wire format
    /// (RFC 3339) can carry.
    #[error(
        "scheduledTime {0} is after 9999-12-31T23:59:59.999Z, the latest the wire format carries"
    )]
    BeyondWireFormat(String),
    /// The broker refused the write or could not be reached.
    #[error("Kafka did not acknowledge the task: {0}")]
    Kafka(#[source] KafkaError),
    /// No acknowledgement came within the delivery timeout (the record may still be written).
    #[error(
        "Kafka did not acknowledge the task within {0:?} (the record may still be written later)"
    )]
    Unacknowledged(Duration),
    /// The task breaks a limit of the wire format that the node's decoder enforces too (a key
    /// longer than [`wire::MAX_ORDERING_ID_BYTES`], `taskData` deeper than
    /// [`wire::MAX_TASK_DATA_DEPTH`], a group number over [`wire::MAX_GROUP_NUMBER`], a time
    /// before [`wire::earliest_time`]): the node would park it, so it is not sent.
    #[error(transparent)]
    Content(ContentError),
}

/// Why a topic's partition count could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TopicError {
    /// The metadata request failed.
    #[error(transparent)]
    Kafka(#[from] KafkaError),
    /// The metadata request's thread failed.
    #[error("the metadata request did not complete: {0}")]
    Interrupted(#[from] tokio::task::JoinError),
    /// The broker knows no such topic, or it has no partitions.
    #[error("the topic does not exist or has no partitions")]
    Missing,
}

impl From<ContentError> for ScheduleError {
    fn from(error: ContentError) -> Self {
        match error {
            ContentError::EmptyOrderingId => ScheduleError::EmptyOrderingId,
            ContentError::EmptyUniquenessKey => ScheduleError::EmptyUniquenessKey,
            other => ScheduleError::Content(other),
        }
    }
}

impl ScheduleError {
    /// Whether the same request can succeed later (Kafka failed or was slow, or the topic could
    /// not be read); the others need a different task or configuration.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ScheduleError::Kafka(_)
                | ScheduleError::Unacknowledged(_)
                | ScheduleError::Topic { .. }
        )
    }

    /// Whether the request itself is at fault (the caller's to fix), found before anything was
    /// sent; otherwise Kafka or the configuration is. Exhaustive, so that a new variant has to be
    /// classified.
    pub fn is_rejection(&self) -> bool {
        match self {
            ScheduleError::EmptyOrderingId
            | ScheduleError::EmptyUniquenessKey
            | ScheduleError::TooFarInThePast { .. }
            | ScheduleError::TooLarge { .. }
            | ScheduleError::BeyondWireFormat(_)
            | ScheduleError::Content(_) => true,
            ScheduleError::Config(_)
            | ScheduleError::Topic { .. }
            | ScheduleError::Kafka(_)
            | ScheduleError::Unacknowledged(_) => false,
        }
    }
}

/// Checks a task against the rules `schedule_task` enforces, as of `now`.
pub fn validate(task: &Task, now: DateTime<Utc>, grace: Duration) -> Result<(), ScheduleError> {
    if task.scheduled_time > wire::latest_time() {
        return Err(ScheduleError::BeyondWireFormat(wire::format_time(
            task.scheduled_time,
        )));
    }
    // The content rules are the decoder's own (the range of times, every number within what
    // the node's store holds), so the node runs what is accepted here.
    wire::check_task(task)?;
    let late_by = now - task.scheduled_time;
    if late_by > TimeDelta::from_std(grace).unwrap_or(TimeDelta::MAX) {
        return Err(ScheduleError::TooFarInThePast {
            scheduled_time: wire::format_time(task.scheduled_time),
            late_by_ms: late_by.num_milliseconds(),
            grace_ms: grace.as_millis(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
