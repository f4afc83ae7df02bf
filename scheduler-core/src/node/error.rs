//! Why a node could not start or stop cleanly, each failure with its cause.

use rdkafka::error::KafkaError;
use scheduler_client::ScheduleError;

use crate::settings::SettingsError;
use crate::store::StoreError;

/// Why a node could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The node was given no handler: it would consume tasks it can never run.
    #[error("the node has no handler: give it one per task type (NodeBuilder::handler), one for every type (NodeBuilder::fallback), or name the types remote workers run ([workers] types)")]
    NoHandlers,
    /// The settings are invalid.
    #[error(transparent)]
    Settings(#[from] SettingsError),
    /// Cassandra is unreachable or the schema could not be created.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A Kafka client could not be created (invalid configuration) or could not do what the
    /// node needed (the brokers unreachable, say).
    #[error("Kafka: {doing}: {source}")]
    Kafka {
        /// What the node was doing.
        doing: String,
        /// The client's error.
        #[source]
        source: KafkaError,
    },
    /// The topic does not exist (and is not to be created), or has no partitions.
    #[error("Kafka: topic {topic} at {bootstrap}: {problem}")]
    Topic {
        /// The topic.
        topic: String,
        /// The brokers asked.
        bootstrap: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// The producer the admin API cancels tasks with could not be created.
    #[error("cannot create the cancellation producer: {0}")]
    Canceller(#[source] ScheduleError),
    /// A thread or runtime of the node could not be started or failed.
    #[error("node runtime: {doing}: {source}")]
    Runtime {
        /// What the node was doing.
        doing: &'static str,
        /// Why it failed.
        #[source]
        source: Cause,
    },
    /// A thread of the node panicked (its panic was logged).
    #[error("node runtime: the {thread} thread panicked")]
    Panicked {
        /// Which thread.
        thread: &'static str,
    },
    /// The node is shutting down: it reads nothing more.
    #[error("the node is stopping")]
    Stopping,
    /// The admin HTTP API could not be started.
    #[error("admin API: {doing}: {source}")]
    Admin {
        /// What the node was doing.
        doing: String,
        /// Why it failed.
        #[source]
        source: Cause,
    },
}

/// The cause of a failure, kept as the error's source.
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

impl NodeError {
    pub(super) fn kafka(doing: impl Into<String>) -> impl FnOnce(KafkaError) -> NodeError {
        let doing = doing.into();
        move |source| NodeError::Kafka { doing, source }
    }

    pub(super) fn runtime<E: std::error::Error + Send + Sync + 'static>(
        doing: &'static str,
    ) -> impl FnOnce(E) -> NodeError {
        move |source| NodeError::Runtime {
            doing,
            source: Box::new(source),
        }
    }

    pub(super) fn admin<E: std::error::Error + Send + Sync + 'static>(
        doing: impl Into<String>,
    ) -> impl FnOnce(E) -> NodeError {
        let doing = doing.into();
        move |source| NodeError::Admin {
            doing,
            source: Box::new(source),
        }
    }
}
