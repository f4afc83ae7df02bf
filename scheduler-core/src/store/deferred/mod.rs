//! Deferred-task lists (`deferred_tasks`): the due tasks a partition tree left in the schedule
//! for want of room (see `actors::partition_executor`), listed by orderingId so that reading them
//! back reads that orderingId's rows only, in run order, never the partition's whole schedule.
//!
//! A tree lists its deferrals under its own id (one Cassandra partition per tree and partition:
//! `(partition_id, tree)`, clustered by orderingId and run order), and writes or deletes only its
//! own rows. A later tree loads from the partition's low-water mark; the mark stays at a list's
//! first task until the list holds every task deferred so far, and then passes it by naming it
//! ([`ListBehind`]). A later tree copies the named lists' rows before the mark into its own
//! lists and never deletes an earlier tree's rows. A tree drops its lists when it stops, unless a
//! mark it wrote named one of them. Rows that are not dropped expire
//! ([`DEFERRED_LIST_RETENTION`]).
//!
//! The whole table in one place: its rows and [`DeferredStore`] here, its statements and
//! implementation on Cassandra in `cassandra.rs`, its in-memory twin in `memory.rs`.

use futures::future::BoxFuture;
use scheduler_client::RunOrder;

use super::{PartitionId, StoreResult};

#[cfg(feature = "node")]
mod cassandra;
#[cfg(any(test, feature = "testing"))]
mod memory;

/// The list of one orderingId's deferred tasks in one tree of a partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeferralList {
    /// The partition.
    pub partition: PartitionId,
    /// The tree's id (unique among the partition's trees, across restarts).
    pub tree: String,
    /// The orderingId whose tasks are listed.
    pub ordering_id: String,
}

/// A list a partition's low-water mark passed ([`super::LowWater::lists`]): every task of its
/// orderingId due from `from` up to the mark that is not final is listed in it, from `from` on.
/// A new tree takes the list's rows before the mark over into its own list.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ListBehind {
    /// The list (its tree and orderingId).
    pub list: DeferralList,
    /// Where its tasks not final begin.
    pub from: RunOrder,
}

/// How long a listed row is kept: far longer than any tree keeps an orderingId's tasks
/// deferred (its head stuck for 30 days), and it only cleans up after a process that died.
pub const DEFERRED_LIST_RETENTION: std::time::Duration =
    std::time::Duration::from_secs(30 * 86_400);

/// Lists of deferred tasks.
pub trait DeferredStore: Send + Sync + 'static {
    /// Lists `tasks` (run orders of the orderingId of `list`), each kept for
    /// [`DEFERRED_LIST_RETENTION`].
    fn list_deferred(
        &self,
        list: DeferralList,
        tasks: Vec<RunOrder>,
    ) -> BoxFuture<'static, StoreResult<()>>;

    /// Up to `limit` of the run orders in `list` from `from` (inclusive), in run order.
    fn listed_deferred(
        &self,
        list: DeferralList,
        from: RunOrder,
        limit: usize,
    ) -> BoxFuture<'static, StoreResult<Vec<RunOrder>>>;

    /// Takes `tasks` (read back) out of `list`.
    fn unlist_deferred(
        &self,
        list: DeferralList,
        tasks: Vec<RunOrder>,
    ) -> BoxFuture<'static, StoreResult<()>>;

    /// Drops every list of `tree` in `partition` (a partition-level delete).
    fn drop_deferral_lists(
        &self,
        partition: PartitionId,
        tree: String,
    ) -> BoxFuture<'static, StoreResult<()>>;
}
