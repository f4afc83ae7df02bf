//! The ownership epoch a partition tree holds: raised by each tree's claim, it fences every
//! older tree of the partition (the PartitionOwnership actor claims and checks it).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The epoch a partition tree holds, shared with the TopicSupervisor so that a rebuilt tree can
/// inherit it (0: not claimed yet).
#[derive(Debug, Clone, Default)]
pub struct EpochCell(Arc<AtomicU64>);

impl EpochCell {
    /// The epoch held (0: none).
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }

    /// Publishes the epoch a claim returned.
    pub(crate) fn set(&self, epoch: u64) {
        self.0.store(epoch, Ordering::SeqCst);
    }
}
