//! What a handler's call returns when it fails.

use std::time::Duration;

/// Why an execution failed, and whether it is worth retrying.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskError {
    /// A transient failure: the task is retried after `after` if given, else after the
    /// settings' backoff, up to the retry limit; then it becomes a dead letter.
    #[error("retryable: {reason}")]
    Retry {
        /// What went wrong.
        reason: String,
        /// When to try again (the handler knows best, e.g. from a rate limit's answer).
        after: Option<Duration>,
    },
    /// The task can never succeed (bad data, say): it is not retried, is recorded as dropped
    /// and becomes a dead letter.
    #[error("invalid: {0}")]
    Invalid(String),
}

impl TaskError {
    /// A transient failure, retried after the settings' backoff.
    pub fn retry(reason: impl Into<String>) -> Self {
        TaskError::Retry {
            reason: reason.into(),
            after: None,
        }
    }

    /// A transient failure, retried after `after`.
    pub fn retry_after(reason: impl Into<String>, after: Duration) -> Self {
        TaskError::Retry {
            reason: reason.into(),
            after: Some(after),
        }
    }

    /// A task that can never succeed: not retried, a dead letter at once.
    pub fn invalid(reason: impl Into<String>) -> Self {
        TaskError::Invalid(reason.into())
    }

    /// What went wrong.
    pub fn reason(&self) -> &str {
        match self {
            TaskError::Retry { reason, .. } | TaskError::Invalid(reason) => reason,
        }
    }
}
