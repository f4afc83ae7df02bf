//! Persistence: a module per table (or folder, for the larger ones), each holding the table's
//! rows, its trait, its statements and implementation on Cassandra (the `node` feature: each
//! table's `cassandra` module), and its in-memory twin for unit tests, the simulation and the
//! testing kit (`testing` feature). `cassandra` is the session, the schema and the row decoding
//! they share; `memory` the in-memory store's state.
//!
//! Every method takes owned arguments and returns a `'static` future so actors can run it.

pub mod attempts;
#[cfg(feature = "node")]
mod cassandra;
pub mod dead_letters;
pub mod deferred;
pub mod finish;
pub(crate) mod group_marks;
pub mod groups;
pub mod identities;
pub mod jobs;
pub mod key_limits;
pub mod leases;
// The unit tests' and the simulation's store, and the testing kit's (`crate::testing`), which
// uses only part of it.
#[cfg(any(test, feature = "testing"))]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) mod memory;
pub mod ownership;
pub(crate) mod pages;
pub mod permits;
pub mod recurring;
pub mod schedule;
pub mod status;
pub mod suspensions;
pub(crate) mod ttl;

use std::sync::Arc;

pub use attempts::{AttemptOutcome, AttemptRecord, AttemptStore};
pub use dead_letters::{DeadLetter, DeadLetterFilter, DeadLetterStore, DeadReason};
pub use deferred::{DeferralList, DeferredStore, ListBehind};
pub use finish::FinishStore;
pub use groups::{
    GroupHeader, GroupKey, GroupMark, GroupState, GroupStore, GroupTally, MemberOutcome,
    ParentRecord,
};
pub use identities::{IdentityRecord, IdentityStore};
pub use jobs::{BucketProgress, JobRecord, JobStore};
pub use key_limits::{KeyLimit, KeyLimitStore, LimitValues};
pub use leases::{LeaseRecord, LeaseStore};
pub use ownership::{LowWater, OwnershipStore, PartitionOwner};
pub use permits::{KeyHolders, PermitStore};
pub use recurring::{FireOutcome, FireRecord, RecurringStore, ScheduleRecord};
pub use schedule::{
    hour_bucket, last_of_each_key, schedule_start, DeferredCancel, DeferredIdentityRecord,
    ReadCursor, RefusedTask, ScheduleStore, WriteStamp, KEYS_PER_READ,
};
pub use status::{StatusRecord, StatusStore, TaskStatus};
pub use suspensions::{Suspension, SuspensionStore, SuspensionTarget, Suspensions};

#[cfg(feature = "node")]
pub use cassandra::{CassandraStore, Migration, StoreLevels, META_KEYSPACE, SCHEMA_VERSION};

/// A Kafka partition number, which is also the schedule's partition.
pub type PartitionId = i32;

/// Concurrent writes while persisting one batch.
pub const WRITE_CONCURRENCY: usize = 64;

/// Result of a store operation.
pub type StoreResult<T> = Result<T, StoreError>;

/// A store operation failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// Connecting to the database failed.
    #[error("cannot connect to Cassandra at {contact_points}: {source}")]
    Connect {
        /// The contact points tried.
        contact_points: String,
        /// The driver's error.
        #[source]
        source: Cause,
    },
    /// A statement failed.
    #[error("Cassandra {operation} failed: {source}")]
    Query {
        /// What the engine was doing.
        operation: &'static str,
        /// The driver's error (or the encoder's, for a value that could not be written).
        #[source]
        source: Cause,
    },
    /// A write that must win a race (a partition's claim) lost it too many times in a row.
    #[error("Cassandra {operation} failed: lost {attempts} concurrent tries in a row")]
    Contended {
        /// What the engine was doing.
        operation: &'static str,
        /// The tries lost.
        attempts: u32,
    },
    /// The store did not answer in time.
    #[error("{operation} did not finish within {after:?}")]
    Timeout {
        /// What the engine was doing.
        operation: &'static str,
        /// The time allowed.
        after: std::time::Duration,
    },
    /// Cassandra refused the statement as invalid (e.g. a clustering key over its 64 KiB limit):
    /// retrying it cannot succeed.
    #[error("Cassandra refused the {operation}: {reason}")]
    Refused {
        /// What the engine was doing.
        operation: &'static str,
        /// Why: Cassandra's message, or the range a value is beyond.
        reason: String,
        /// The driver's error, when Cassandra refused it.
        #[source]
        source: Option<Cause>,
    },
    /// The keyspace's schema is older than this node's (or absent): it must be migrated first.
    #[error(
        "keyspace `{keyspace}` is at schema version {found}{}, this node needs {needs}: run \
         `scheduler migrate` with the node's settings file (or set [cassandra] auto_migrate = \
         true in development)",
        if *found == 0 { " (no schema yet)" } else { "" }
    )]
    SchemaBehind {
        /// The keyspace.
        keyspace: String,
        /// Its version (0: no schema).
        found: u32,
        /// This release's version.
        needs: u32,
    },
    /// The keyspace's schema is newer than this node's: the node must be upgraded.
    #[error(
        "keyspace `{keyspace}` is at schema version {found}, newer than this node's {needs}: \
         upgrade the node"
    )]
    SchemaAhead {
        /// The keyspace.
        keyspace: String,
        /// Its version.
        found: u32,
        /// This release's version.
        needs: u32,
    },
    /// A stored row could not be understood.
    #[error("corrupt {what} row: {reason}")]
    Corrupt {
        /// Which table.
        what: &'static str,
        /// What is wrong.
        reason: String,
    },
}

/// What made a store operation fail (the driver's error, kept whole; shared, as one failure
/// may answer several waiters).
pub type Cause = std::sync::Arc<dyn std::error::Error + Send + Sync>;

impl StoreError {
    /// A failed `operation`, caused by `cause`.
    pub fn query(
        operation: &'static str,
        cause: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        StoreError::Query {
            operation,
            source: std::sync::Arc::new(cause),
        }
    }

    /// A value the store would refuse (`reason`), refused before it is sent.
    pub fn refused(operation: &'static str, reason: impl Into<String>) -> Self {
        StoreError::Refused {
            operation,
            reason: reason.into(),
            source: None,
        }
    }
}

/// Every table of the store but the leases ([`LeaseStore`]), as one store: what the admin API,
/// the queue's producer and the testing kit hold. Partition trees are given [`Tables`] instead,
/// each part only the tables it reads and writes.
pub trait TaskStore:
    ScheduleStore
    + DeferredStore
    + StatusStore
    + FinishStore
    + AttemptStore
    + OwnershipStore
    + DeadLetterStore
    + IdentityStore
    + GroupStore
    + SuspensionStore
    + JobStore
    + RecurringStore
    + PermitStore
    + KeyLimitStore
{
}

impl<T> TaskStore for T where
    T: ScheduleStore
        + DeferredStore
        + StatusStore
        + FinishStore
        + AttemptStore
        + OwnershipStore
        + DeadLetterStore
        + IdentityStore
        + GroupStore
        + SuspensionStore
        + JobStore
        + RecurringStore
        + PermitStore
        + KeyLimitStore
{
}

/// The tables a node's partition trees use, each on its own: the trees' builder hands each
/// part of a tree only the tables it reads and writes.
#[derive(Clone)]
pub struct Tables {
    /// The schedule, its bucket index and the deferred records beside it.
    pub schedule: Arc<dyn ScheduleStore>,
    /// The deferred-task lists.
    pub deferred: Arc<dyn DeferredStore>,
    /// Final statuses.
    pub status: Arc<dyn StatusStore>,
    /// A final status and the removal from the schedule, at once.
    pub finish: Arc<dyn FinishStore>,
    /// Attempt histories.
    pub attempts: Arc<dyn AttemptStore>,
    /// Partition ownership and low-water marks.
    pub ownership: Arc<dyn OwnershipStore>,
    /// Running-task leases.
    pub leases: Arc<dyn LeaseStore>,
    /// Identities' records.
    pub identities: Arc<dyn IdentityStore>,
    /// Dead letters.
    pub dead_letters: Arc<dyn DeadLetterStore>,
    /// Groups' members and marks.
    pub groups: Arc<dyn GroupStore>,
    /// Jobs and their progress.
    pub jobs: Arc<dyn JobStore>,
    /// Per-key permits across the cluster.
    pub permits: Arc<dyn PermitStore>,
}

impl Tables {
    /// The tables of `store`.
    pub fn of<S: TaskStore + LeaseStore>(store: &Arc<S>) -> Tables {
        Tables {
            schedule: store.clone(),
            deferred: store.clone(),
            status: store.clone(),
            finish: store.clone(),
            attempts: store.clone(),
            ownership: store.clone(),
            leases: store.clone(),
            identities: store.clone(),
            dead_letters: store.clone(),
            groups: store.clone(),
            jobs: store.clone(),
            permits: store.clone(),
        }
    }
}
