//! The end of a task in one request: its final status (`task_status`) and its removal from the
//! schedule (`scheduled_tasks`). Both rows have the same partition key (partition and hour
//! bucket), so on Cassandra they go as one unlogged batch that the replicas apply as one
//! mutation: one request where there were two, and the row never outlives the status it needs.
//! Each table adds its own row (`status::cassandra::add_status`,
//! `schedule::cassandra::add_removal`); this module only puts them together.

use futures::future::BoxFuture;
use scheduler_client::TaskKey;

use super::{PartitionId, StatusRecord, StoreResult};

/// A task's final status and its removal from the schedule, at once.
pub trait FinishStore: Send + Sync + 'static {
    /// Records `status` as the task's final status and deletes it from the schedule, in one
    /// request: both are written or, on an error, the whole may be tried again.
    fn finish(
        &self,
        partition: PartitionId,
        key: TaskKey,
        status: StatusRecord,
    ) -> BoxFuture<'static, StoreResult<()>>;
}

mod cassandra {
    use std::sync::Arc;

    use futures::future::BoxFuture;
    use futures::FutureExt;
    use scheduler_client::TaskKey;

    use super::FinishStore;
    use crate::store::cassandra::{CassandraStore, Writes};
    use crate::store::{schedule, status, PartitionId, StatusRecord, StoreResult};

    impl FinishStore for CassandraStore {
        fn finish(
            &self,
            partition: PartitionId,
            key: TaskKey,
            status: StatusRecord,
        ) -> BoxFuture<'static, StoreResult<()>> {
            let inner = Arc::clone(&self.inner);
            async move {
                let mut writes = Writes::new();
                status::cassandra::add_status(&inner, &mut writes, partition, &key, status).await?;
                schedule::cassandra::add_removal(&inner, &mut writes, partition, &key).await?;
                // Counted as a status write (of two rows).
                inner.run_writes(writes, "status write").await
            }
            .boxed()
        }
    }
}

#[cfg(any(test, feature = "testing"))]
mod memory {
    use futures::future::BoxFuture;
    use scheduler_client::TaskKey;

    use super::FinishStore;
    use crate::store::memory::MemoryStore;
    use crate::store::{schedule, status, PartitionId, StatusRecord, StoreResult};

    impl FinishStore for MemoryStore {
        fn finish(
            &self,
            partition: PartitionId,
            key: TaskKey,
            status: StatusRecord,
        ) -> BoxFuture<'static, StoreResult<()>> {
            // A status write, to the simulation's faults too.
            self.run("status write", move |s| {
                status::memory::record(s, partition, key.clone(), status);
                schedule::memory::remove(s, partition, key);
            })
        }
    }
}
