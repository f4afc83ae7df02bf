//! The in-memory store's deferred-task lists, as in Cassandra: a read is a slice of one list
//! from where it starts, stepping over the deleted rows between there and its last row.

use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use scheduler_client::RunOrder;

use crate::store::deferred::{DeferralList, DeferredStore};
use crate::store::memory::MemoryStore;
use crate::store::{PartitionId, StoreResult};

impl DeferredStore for MemoryStore {
    fn list_deferred(
        &self,
        list: DeferralList,
        tasks: Vec<RunOrder>,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.run("deferred list write", move |s| {
            for run in tasks {
                let row = (list.clone(), run);
                s.deferred_tombstones.remove(&row);
                s.deferred.insert(row);
            }
        })
    }

    fn listed_deferred(
        &self,
        list: DeferralList,
        from: RunOrder,
        limit: usize,
    ) -> BoxFuture<'static, StoreResult<Vec<RunOrder>>> {
        let rows_read = Arc::clone(&self.deferred_rows_read);
        self.run("deferred list read", move |s| {
            let lower = Bound::Included((list.clone(), from));
            let runs: Vec<RunOrder> = (s.deferred.range((lower.clone(), Bound::Unbounded)))
                .take_while(|(l, _)| *l == list)
                .take(limit)
                .map(|(_, run)| run.clone())
                .collect();
            let stopped_at = runs.last().filter(|_| runs.len() == limit).cloned();
            let stepped_over = (s.deferred_tombstones.range((lower, Bound::Unbounded)))
                .take_while(|(l, run)| *l == list && stopped_at.as_ref().is_none_or(|at| run < at))
                .count();
            s.step_over_tombstones("deferred list read", stepped_over)?;
            rows_read.fetch_add(runs.len(), Ordering::SeqCst);
            Ok(runs)
        })
        .map(|result| result.and_then(|runs| runs))
        .boxed()
    }

    fn unlist_deferred(
        &self,
        list: DeferralList,
        tasks: Vec<RunOrder>,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.run("deferred list delete", move |s| {
            for run in tasks {
                let row = (list.clone(), run);
                s.deferred.remove(&row);
                s.deferred_tombstones.insert(row);
            }
        })
    }

    fn drop_deferral_lists(
        &self,
        partition: PartitionId,
        tree: String,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.run("deferred lists delete", move |s| {
            // A partition-level delete: one tombstone for the whole partition, no row's.
            let of_tree = |l: &DeferralList| l.partition == partition && l.tree == tree;
            s.deferred.retain(|(l, _)| !of_tree(l));
            s.deferred_tombstones.retain(|(l, _)| !of_tree(l));
        })
    }
}
