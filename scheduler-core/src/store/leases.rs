//! Running-task leases (`task_leases`): which orderingIds each partition tree is calling now,
//! so a newer tree of the partition starts none of them while the lease is live.
//!
//! The whole table in one place: its rows and [`LeaseStore`], its statements and implementation
//! on Cassandra (`cassandra`), its in-memory twin (`memory`).

use futures::future::BoxFuture;

use super::{PartitionId, StoreResult};

/// The running-task lease of one partition tree (its holder): the orderingIds whose calls it is
/// running now. A newer tree of the partition starts none of them while the lease is live.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseRecord {
    /// The node the tree runs on.
    pub node: String,
    /// The tree's ownership epoch (0: not claimed yet).
    pub epoch: u64,
    /// `(orderingId, task key)` of each call running, by orderingId.
    pub running: Vec<(String, String)>,
}

/// The running-task leases of partition trees (the `task_leases` table). A lease expires on
/// its own `ttl` after its last write: a dead or paused holder stops renewing it.
pub trait LeaseStore: Send + Sync + 'static {
    /// Writes (or renews) `holder`'s lease on `partition` for `ttl`.
    fn write_lease(
        &self,
        partition: PartitionId,
        holder: String,
        lease: LeaseRecord,
        ttl: std::time::Duration,
    ) -> BoxFuture<'static, StoreResult<()>>;

    /// Releases `holder`'s lease on `partition`.
    fn delete_lease(
        &self,
        partition: PartitionId,
        holder: String,
    ) -> BoxFuture<'static, StoreResult<()>>;

    /// The live leases on `partition`, by holder.
    fn leases(
        &self,
        partition: PartitionId,
    ) -> BoxFuture<'static, StoreResult<Vec<(String, LeaseRecord)>>>;
}

/// `task_leases` on Cassandra: a row per holder in the partition's row, written with a TTL.
#[cfg(feature = "node")]
mod cassandra {
    use std::sync::Arc;

    use futures::future::BoxFuture;
    use futures::FutureExt;
    use scylla::statement::prepared::PreparedStatement;

    use super::{LeaseRecord, LeaseStore};
    use crate::store::cassandra::rows::{epoch_value, rows_of};
    use crate::store::cassandra::{CassandraStore, Preparing, TableStatements};
    use crate::store::{PartitionId, StoreError, StoreResult};

    /// The statements of `task_leases`.
    struct LeaseStatements {
        insert: PreparedStatement,
        delete: PreparedStatement,
        select: PreparedStatement,
    }

    impl TableStatements for LeaseStatements {
        async fn prepare(on: &Preparing<'_>) -> StoreResult<Self> {
            let ks = on.keyspace;
            let prepare = |cql: String| on.prepare("prepare lease statement", cql);
            Ok(LeaseStatements {
                insert: prepare(format!(
                    "INSERT INTO {ks}.task_leases (partition_id, holder, node, epoch, running) \
                 VALUES (?, ?, ?, ?, ?) USING TTL ?"
                ))
                .await?,
                delete: prepare(format!(
                    "DELETE FROM {ks}.task_leases WHERE partition_id = ? AND holder = ?"
                ))
                .await?,
                select: prepare(format!(
                "SELECT holder, node, epoch, running FROM {ks}.task_leases WHERE partition_id = ?"
            ))
                .await?,
            })
        }
    }

    impl LeaseStore for CassandraStore {
        fn write_lease(
            &self,
            partition: PartitionId,
            holder: String,
            lease: LeaseRecord,
            ttl: std::time::Duration,
        ) -> BoxFuture<'static, StoreResult<()>> {
            let inner = Arc::clone(&self.inner);
            async move {
                let running = serde_json::to_string(&lease.running)
                    .map_err(|e| StoreError::query("lease write", e))?;
                // Cassandra's TTL counts whole seconds: round up, never down to "no TTL".
                let ttl = i32::try_from(ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0))
                    .unwrap_or(i32::MAX)
                    .max(1);
                inner
                    .run(
                        &inner.statements::<LeaseStatements>().await?.insert,
                        (
                            partition,
                            holder,
                            lease.node,
                            epoch_value(lease.epoch),
                            running,
                            ttl,
                        ),
                        "lease write",
                    )
                    .await
                    .map(|_| ())
            }
            .boxed()
        }

        fn delete_lease(
            &self,
            partition: PartitionId,
            holder: String,
        ) -> BoxFuture<'static, StoreResult<()>> {
            let inner = Arc::clone(&self.inner);
            async move {
                inner
                    .run(
                        &inner.statements::<LeaseStatements>().await?.delete,
                        (partition, holder),
                        "lease delete",
                    )
                    .await
                    .map(|_| ())
            }
            .boxed()
        }

        fn leases(
            &self,
            partition: PartitionId,
        ) -> BoxFuture<'static, StoreResult<Vec<(String, LeaseRecord)>>> {
            let inner = Arc::clone(&self.inner);
            async move {
                let result = inner
                    .run(
                        &inner.statements::<LeaseStatements>().await?.select,
                        (partition,),
                        "lease read",
                    )
                    .await?;
                let rows = rows_of::<(String, Option<String>, Option<i64>, Option<String>)>(
                    result, "lease",
                )?;
                rows.into_iter()
                    .map(|(holder, node, epoch, running)| {
                        let running = match running.as_deref() {
                            None | Some("") => Vec::new(),
                            Some(text) => {
                                serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
                                    what: "lease",
                                    reason: e.to_string(),
                                })?
                            }
                        };
                        let lease = LeaseRecord {
                            node: node.unwrap_or_default(),
                            epoch: u64::try_from(epoch.unwrap_or(0)).unwrap_or(0),
                            running,
                        };
                        Ok((holder, lease))
                    })
                    .collect()
            }
            .boxed()
        }
    }
}

/// `task_leases` in memory: a lease lives until its TTL on the store's clock.
#[cfg(any(test, feature = "testing"))]
mod memory {
    use futures::future::BoxFuture;

    use super::{LeaseRecord, LeaseStore};
    use crate::store::memory::MemoryStore;
    use crate::store::{PartitionId, StoreResult};

    impl LeaseStore for MemoryStore {
        fn write_lease(
            &self,
            partition: PartitionId,
            holder: String,
            lease: LeaseRecord,
            ttl: std::time::Duration,
        ) -> BoxFuture<'static, StoreResult<()>> {
            // Leases never take an injected failure: those are meant for the schedule and status.
            let expires = tokio::time::Instant::now() + ttl;
            self.apply("lease write", move |s| {
                s.lease_tombstones.remove(&(partition, holder.clone()));
                s.leases.insert((partition, holder), (lease, expires));
                Ok(())
            })
        }

        fn delete_lease(
            &self,
            partition: PartitionId,
            holder: String,
        ) -> BoxFuture<'static, StoreResult<()>> {
            self.apply("lease delete", move |s| {
                s.leases.remove(&(partition, holder.clone()));
                s.lease_tombstones.insert((partition, holder));
                Ok(())
            })
        }

        fn leases(
            &self,
            partition: PartitionId,
        ) -> BoxFuture<'static, StoreResult<Vec<(String, LeaseRecord)>>> {
            let now = tokio::time::Instant::now();
            self.apply("lease read", move |s| {
                let mut live = Vec::new();
                let mut expired = 0;
                for ((p, holder), (lease, expires)) in &s.leases {
                    match (*p == partition, *expires > now) {
                        (true, true) => live.push((holder.clone(), lease.clone())),
                        (true, false) => expired += 1,
                        (false, _) => {}
                    }
                }
                // The whole partition: every released or expired holder's row is stepped over.
                let released = (s.lease_tombstones.iter())
                    .filter(|(p, _)| *p == partition)
                    .count();
                let stepped_over = expired + released;
                s.step_over_tombstones("lease read", stepped_over)
                    .map(|()| live)
            })
        }
    }
}
