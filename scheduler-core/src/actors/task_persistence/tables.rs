//! The tables a partition's persistence is given.

use std::sync::Arc;

use crate::groups::GroupTables;
use crate::identity::IdentityTables;
use crate::store::{
    DeadLetterStore, IdentityStore, OwnershipStore, ScheduleStore, StatusStore, Tables,
};

/// The tables a partition's persistence reads and writes: the schedule, the ownership's
/// low-water mark, the identities' records and the statuses they read; and, to apply a cancel,
/// the dead letters and the groups of the tasks it ends.
#[derive(Clone)]
pub struct PersistenceTables {
    /// Where tasks are written and loaded from.
    pub schedule: Arc<dyn ScheduleStore>,
    /// Statuses: cancels recorded, a revived identity's cleared.
    pub status: Arc<dyn StatusStore>,
    /// The low-water mark.
    pub ownership: Arc<dyn OwnershipStore>,
    /// Identities' records.
    pub identities: Arc<dyn IdentityStore>,
    /// Dead letters (a cancel of a task that failed records its failure instead).
    pub dead_letters: Arc<dyn DeadLetterStore>,
    /// Groups (a cancelled member finishes in its group).
    pub groups: GroupTables,
}

impl PersistenceTables {
    /// What resolving identity records reads.
    pub(super) fn identity_tables(&self) -> IdentityTables {
        IdentityTables {
            identities: Arc::clone(&self.identities),
            status: Arc::clone(&self.status),
        }
    }
}

impl From<&Tables> for PersistenceTables {
    fn from(tables: &Tables) -> Self {
        PersistenceTables {
            schedule: Arc::clone(&tables.schedule),
            status: Arc::clone(&tables.status),
            ownership: Arc::clone(&tables.ownership),
            identities: Arc::clone(&tables.identities),
            dead_letters: Arc::clone(&tables.dead_letters),
            groups: GroupTables::from(tables),
        }
    }
}
