//! Partition ownership (`partition_owners`): the epoch every claim raises, which fences older
//! trees, and the partition's low-water mark.
//!
//! The whole table in one place: its rows and [`OwnershipStore`] here, its statements and
//! implementation on Cassandra in `cassandra.rs`, its in-memory twin in `memory.rs`.

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use scheduler_client::TaskKey;

use super::{ListBehind, PartitionId, StoreResult};

#[cfg(feature = "node")]
mod cassandra;
#[cfg(any(test, feature = "testing"))]
mod memory;

/// Partition ownership (`partition_owners`): the epoch every claim raises, which fences older
/// trees.
pub trait OwnershipStore: Send + Sync + 'static {
    /// Claims `partition` for a new actor tree of node `owner`: raises the partition's
    /// ownership epoch by one with a lightweight transaction and returns the new epoch. Any tree
    /// holding an older epoch is fenced from then on.
    fn claim_partition(
        &self,
        partition: PartitionId,
        owner: String,
        at: DateTime<Utc>,
    ) -> BoxFuture<'static, StoreResult<u64>>;

    /// The partition's current ownership epoch (0: never claimed), read serially so that every
    /// completed claim is seen.
    fn partition_epoch(&self, partition: PartitionId) -> BoxFuture<'static, StoreResult<u64>>;

    /// The partition's low-water mark: every task of it due before this time has a final
    /// status, but the ones listed with it. `None` when none was recorded (loading starts at
    /// the first indexed bucket).
    fn low_water(
        &self,
        partition: PartitionId,
    ) -> BoxFuture<'static, StoreResult<Option<LowWater>>>;

    /// Lowers the low-water mark to `at` (its list kept) if the partition's epoch is still
    /// `epoch` (a lightweight transaction, so a fenced tree cannot move it). Returns whether it
    /// was recorded.
    fn set_low_water(
        &self,
        partition: PartitionId,
        epoch: u64,
        at: DateTime<Utc>,
    ) -> BoxFuture<'static, StoreResult<bool>>;

    /// Moves the low-water mark to `at` with the tasks due before it that are not final
    /// (`behind`, and the deferred tasks in `lists`), in one lightweight transaction on
    /// `epoch`. Returns whether it was recorded.
    fn advance_low_water(
        &self,
        partition: PartitionId,
        epoch: u64,
        at: DateTime<Utc>,
        behind: Vec<TaskKey>,
        lists: Vec<ListBehind>,
    ) -> BoxFuture<'static, StoreResult<bool>>;

    /// Every partition ever claimed, in partition order: who claimed it last and when, and its
    /// epoch. The last claimer owns the partition until another claims it, also after it left
    /// (what operators see: the dashboard's and `GET /api/v1/partitions`' owners).
    fn owners(&self) -> BoxFuture<'static, StoreResult<Vec<PartitionOwner>>>;
}

/// A partition's low-water mark as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LowWater {
    /// Every task due before it is final, but the ones in `behind`.
    pub at: DateTime<Utc>,
    /// The tasks due before the mark that were not final when it was written (retrying,
    /// suspended, waiting for a handler or behind another task of their orderingId): a new
    /// tree reads each by its key. `None` for a mark written by a release before schema
    /// version 8, which kept such tasks in `retrying_tasks`.
    pub behind: Option<Vec<TaskKey>>,
    /// The deferred-task lists the mark passed: a new tree takes over their rows due before
    /// the mark.
    pub lists: Vec<ListBehind>,
}

/// A partition's row of `partition_owners`: its last claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionOwner {
    /// The partition.
    pub partition: PartitionId,
    /// The epoch of the last claim.
    pub epoch: u64,
    /// The node that claimed it last (`None` only in a row no claim wrote).
    pub owner: Option<String>,
    /// When it was claimed.
    pub claimed_at: Option<DateTime<Utc>>,
}
