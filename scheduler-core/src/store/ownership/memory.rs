//! `partition_owners` in memory.

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use scheduler_client::TaskKey;

use super::{LowWater, OwnershipStore, PartitionOwner};
use crate::store::memory::MemoryStore;
use crate::store::{PartitionId, StoreResult};

impl OwnershipStore for MemoryStore {
    // Ownership never takes an injected failure: those are meant for the schedule and status.
    fn claim_partition(
        &self,
        partition: PartitionId,
        owner: String,
        at: DateTime<Utc>,
    ) -> BoxFuture<'static, StoreResult<u64>> {
        self.apply("partition claim", move |state| {
            let epoch = state.epochs.entry(partition).or_default();
            *epoch += 1;
            let epoch = *epoch;
            state.claims.insert(partition, (owner, at));
            Ok(epoch)
        })
    }

    fn partition_epoch(&self, partition: PartitionId) -> BoxFuture<'static, StoreResult<u64>> {
        self.apply("epoch read", move |state| {
            Ok(state.epochs.get(&partition).copied().unwrap_or(0))
        })
    }

    fn low_water(
        &self,
        partition: PartitionId,
    ) -> BoxFuture<'static, StoreResult<Option<LowWater>>> {
        self.apply("low-water read", move |state| {
            Ok(state.low_water.get(&partition).cloned())
        })
    }

    fn set_low_water(
        &self,
        partition: PartitionId,
        epoch: u64,
        at: DateTime<Utc>,
    ) -> BoxFuture<'static, StoreResult<bool>> {
        self.apply("low-water write", move |state| {
            let current = state.epochs.get(&partition).copied().unwrap_or(0);
            let applied = current == epoch && epoch > 0;
            if applied {
                // Only the mark: the lists written with it stay, as in Cassandra.
                let (behind, lists) = match state.low_water.get(&partition) {
                    Some(mark) => (mark.behind.clone(), mark.lists.clone()),
                    None => (None, Vec::new()),
                };
                let mark = LowWater { at, behind, lists };
                state.low_water.insert(partition, mark);
            }
            Ok(applied)
        })
    }

    fn advance_low_water(
        &self,
        partition: PartitionId,
        epoch: u64,
        at: DateTime<Utc>,
        behind: Vec<TaskKey>,
        lists: Vec<crate::store::ListBehind>,
    ) -> BoxFuture<'static, StoreResult<bool>> {
        // An injected failure ("low-water advance") fails it before it applies.
        self.run("low-water advance", move |state| {
            let current = state.epochs.get(&partition).copied().unwrap_or(0);
            let applied = current == epoch && epoch > 0;
            if applied {
                let behind = Some(behind);
                state
                    .low_water
                    .insert(partition, LowWater { at, behind, lists });
            }
            applied
        })
    }

    fn owners(&self) -> BoxFuture<'static, StoreResult<Vec<PartitionOwner>>> {
        self.apply("owners read", |state| {
            let mut owners: Vec<PartitionOwner> = (state.epochs.iter())
                .map(|(&partition, &epoch)| {
                    let claim = state.claims.get(&partition);
                    PartitionOwner {
                        partition,
                        epoch,
                        owner: claim.map(|(owner, _)| owner.clone()),
                        claimed_at: claim.map(|(_, at)| *at),
                    }
                })
                .collect();
            owners.sort_by_key(|o| o.partition);
            Ok(owners)
        })
    }
}
