//! The partitions the consumer must seek back before it goes on with them. A batch of a partition
//! that was not persisted is polled again: the consumer seeks back to the batch's first offset.
//! Until that seek succeeded, the consumer reads that partition past records that are not
//! durable, so nothing more of it may reach its tree or be committed: a later batch that
//! persisted would commit past the lost one. Pure bookkeeping, no Kafka: the poll loop
//! (`consumer.rs`) makes the seeks and the commits this decides.

use std::collections::BTreeMap;

use crate::store::PartitionId;

/// Per partition, where the consumer must seek back to before it may go on with it.
#[derive(Debug, Default)]
pub(crate) struct PendingRewinds {
    pending: BTreeMap<PartitionId, Rewind>,
}

/// One partition's pending rewind.
#[derive(Debug, Clone, Copy)]
struct Rewind {
    /// The first offset not durable: the first offset of the batch that was not persisted.
    offset: i64,
    /// Seeks back to `offset` that failed so far.
    failed_attempts: u32,
}

impl PendingRewinds {
    /// Settles a polled batch once its trees answered. `spans` holds the first and last offset
    /// of each partition in the batch, `failed` the partitions whose records were not persisted,
    /// `owned` the partitions assigned now. Returns the offsets to commit (the next offset to
    /// read, per partition now durable); every failed partition still owned is left pending, to
    /// be sought back to its first offset in the batch. A partition no longer owned is not: its
    /// next owner starts from the committed offset, which is before the batch.
    pub(crate) fn settle(
        &mut self,
        spans: &BTreeMap<PartitionId, (i64, i64)>,
        failed: &[PartitionId],
        owned: &[PartitionId],
    ) -> Vec<(PartitionId, i64)> {
        let mut commit = Vec::new();
        for (partition, (first, last)) in spans {
            if failed.contains(partition) {
                if owned.contains(partition) {
                    self.rewind(*partition, *first);
                }
            } else if !self.holds(*partition) {
                commit.push((*partition, last + 1));
            }
        }
        commit
    }

    /// `partition` must be sought back to `offset`; a rewind already pending to an earlier
    /// offset stays.
    fn rewind(&mut self, partition: PartitionId, offset: i64) {
        let rewind = self.pending.entry(partition).or_insert(Rewind {
            offset,
            failed_attempts: 0,
        });
        rewind.offset = rewind.offset.min(offset);
    }

    /// Whether the records of `partition` are to be left alone (neither handed to its tree nor
    /// committed): it waits to be sought back, and they are read again after the seek.
    pub(crate) fn holds(&self, partition: PartitionId) -> bool {
        self.pending.contains_key(&partition)
    }

    /// The seeks to make before the next poll: each pending partition and its offset.
    pub(crate) fn due(&self) -> Vec<(PartitionId, i64)> {
        self.pending
            .iter()
            .map(|(partition, rewind)| (*partition, rewind.offset))
            .collect()
    }

    /// The seek back of `partition` succeeded: its records are read again from the offset
    /// pending and flow as before. Returns the failed attempts before it.
    pub(crate) fn sought(&mut self, partition: PartitionId) -> u32 {
        self.pending
            .remove(&partition)
            .map_or(0, |rewind| rewind.failed_attempts)
    }

    /// The seek back of `partition` failed. Returns the failed attempts so far (1 the first
    /// time).
    pub(crate) fn seek_failed(&mut self, partition: PartitionId) -> u32 {
        self.pending.get_mut(&partition).map_or(0, |rewind| {
            rewind.failed_attempts += 1;
            rewind.failed_attempts
        })
    }

    /// `partitions` were revoked: whoever reads them next starts from the committed offset, which
    /// never passes a record that is not durable, so there is nothing to seek.
    pub(crate) fn forget(&mut self, partitions: &[PartitionId]) {
        for partition in partitions {
            self.pending.remove(partition);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans(of: &[(PartitionId, i64, i64)]) -> BTreeMap<PartitionId, (i64, i64)> {
        of.iter()
            .map(|(partition, first, last)| (*partition, (*first, *last)))
            .collect()
    }

    #[test]
    fn a_batch_after_a_failed_seek_back_commits_nothing_of_that_partition() {
        let mut rewinds = PendingRewinds::default();
        assert!(rewinds
            .settle(&spans(&[(0, 10, 19)]), &[0], &[0])
            .is_empty());
        assert_eq!(rewinds.due(), vec![(0, 10)]);
        assert_eq!(rewinds.seek_failed(0), 1);
        // The consumer reads on from 20: those records are not handed on, nothing is committed.
        assert!(rewinds.holds(0), "records past a failed batch must be held");
        assert_eq!(
            rewinds.settle(&spans(&[(0, 20, 29)]), &[], &[0]),
            vec![],
            "committed past the records 10..=19, which are not durable"
        );
        assert_eq!(rewinds.due(), vec![(0, 10)], "the seek is retried");
        assert_eq!(rewinds.seek_failed(0), 2);
        assert_eq!(rewinds.due(), vec![(0, 10)]);
    }

    #[test]
    fn a_successful_seek_later_clears_it() {
        let mut rewinds = PendingRewinds::default();
        rewinds.settle(&spans(&[(0, 10, 19)]), &[0], &[0]);
        rewinds.seek_failed(0);
        rewinds.seek_failed(0);
        assert_eq!(rewinds.due(), vec![(0, 10)]);
        assert_eq!(rewinds.sought(0), 2);
        assert!(!rewinds.holds(0));
        assert!(rewinds.due().is_empty());
        assert_eq!(
            rewinds.settle(&spans(&[(0, 10, 29)]), &[], &[0]),
            vec![(0, 30)]
        );
    }

    #[test]
    fn a_revoke_drops_it() {
        let mut rewinds = PendingRewinds::default();
        rewinds.settle(&spans(&[(0, 10, 19), (1, 5, 9)]), &[0, 1], &[0, 1]);
        rewinds.seek_failed(0);
        rewinds.seek_failed(1);
        rewinds.forget(&[0]);
        assert!(!rewinds.holds(0));
        assert!(rewinds.holds(1));
        assert_eq!(rewinds.due(), vec![(1, 5)]);
        // Read again from the committed offset (at most 10) by whoever owns it next.
        assert_eq!(
            rewinds.settle(&spans(&[(0, 8, 19)]), &[], &[0, 1]),
            vec![(0, 20)]
        );
    }

    #[test]
    fn other_partitions_keep_committing() {
        let mut rewinds = PendingRewinds::default();
        assert_eq!(
            rewinds.settle(&spans(&[(0, 10, 19), (1, 100, 109)]), &[0], &[0, 1]),
            vec![(1, 110)]
        );
        rewinds.seek_failed(0);
        assert!(!rewinds.holds(1));
        assert_eq!(
            rewinds.settle(&spans(&[(0, 20, 29), (1, 110, 119)]), &[], &[0, 1]),
            vec![(1, 120)]
        );
        assert_eq!(rewinds.due(), vec![(0, 10)]);
    }

    #[test]
    fn a_partition_no_longer_owned_is_not_sought_back() {
        let mut rewinds = PendingRewinds::default();
        assert!(rewinds
            .settle(&spans(&[(0, 10, 19), (1, 5, 9)]), &[0, 1], &[1])
            .is_empty());
        assert_eq!(rewinds.due(), vec![(1, 5)]);
        assert!(!rewinds.holds(0));
    }

    #[test]
    fn a_partition_failing_again_is_sought_back_to_the_earliest_offset() {
        let mut rewinds = PendingRewinds::default();
        rewinds.settle(&spans(&[(0, 10, 19)]), &[0], &[0]);
        rewinds.seek_failed(0);
        rewinds.settle(&spans(&[(0, 20, 29)]), &[0], &[0]);
        assert_eq!(rewinds.due(), vec![(0, 10)]);
    }
}
