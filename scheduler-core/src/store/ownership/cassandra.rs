//! `partition_owners` on Cassandra: a row per partition, claimed and marked with lightweight
//! transactions on its epoch.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use futures::FutureExt;
use scheduler_client::{RunOrder, TaskKey};
use scylla::statement::prepared::PreparedStatement;

use super::{LowWater, OwnershipStore, PartitionOwner};
use crate::settings::SerialConsistencyLevel;
use crate::store::cassandra::rows::{applied, epoch_value, first_row_of};
use crate::store::cassandra::{levels, CassandraStore, Preparing, StoreLevels, TableStatements};
use crate::store::{DeferralList, ListBehind, PartitionId, StoreError, StoreResult};

/// Claims lost to a concurrent claimer in a row before giving up (each retry re-reads the epoch).
const CLAIM_ATTEMPTS: u32 = 10;

/// The statements of `partition_owners`.
struct OwnershipStatements {
    select_low_water: PreparedStatement,
    set_low_water: PreparedStatement,
    advance_low_water: PreparedStatement,
    select_epoch: PreparedStatement,
    select_epoch_serial: PreparedStatement,
    claim_first: PreparedStatement,
    claim_next: PreparedStatement,
    select_owners: PreparedStatement,
}

impl TableStatements for OwnershipStatements {
    /// Claims (and the reads that must see them) run at `on.ownership`.
    async fn prepare(on: &Preparing<'_>) -> StoreResult<Self> {
        let ownership = on.ownership;
        let mut statements = Self::prepare_all(on).await?;
        statements
            .select_epoch_serial
            .set_consistency(levels::serial_read(ownership));
        for claim in [
            &mut statements.claim_first,
            &mut statements.claim_next,
            &mut statements.set_low_water,
            &mut statements.advance_low_water,
        ] {
            claim.set_serial_consistency(Some(levels::serial(ownership)));
        }
        if ownership == SerialConsistencyLevel::Serial {
            // Claims linearised across data centres: their commits, and the checks that must
            // see them, reach a majority of all replicas.
            for statement in [
                &mut statements.claim_first,
                &mut statements.claim_next,
                &mut statements.select_epoch,
                &mut statements.set_low_water,
                &mut statements.advance_low_water,
                &mut statements.select_low_water,
            ] {
                statement.set_consistency(scylla::statement::Consistency::Quorum);
            }
        }
        Ok(statements)
    }
}

impl OwnershipStatements {
    async fn prepare_all(on: &Preparing<'_>) -> StoreResult<Self> {
        let ks = on.keyspace;
        let prepare = |cql: String| on.prepare("prepare ownership statement", cql);
        Ok(OwnershipStatements {
            select_low_water: prepare(format!(
                "SELECT low_water, behind_mark FROM {ks}.partition_owners WHERE partition_id = ?"
            ))
            .await?,
            set_low_water: prepare(format!(
                "UPDATE {ks}.partition_owners SET low_water = ? WHERE partition_id = ? \
                 IF epoch = ?"
            ))
            .await?,
            advance_low_water: prepare(format!(
                "UPDATE {ks}.partition_owners SET low_water = ?, behind_mark = ? \
                 WHERE partition_id = ? IF epoch = ?"
            ))
            .await?,
            // At the session's consistency (LOCAL_QUORUM; QUORUM when claims are SERIAL): a
            // claim whose lightweight transaction completed was committed at that level, so a
            // read that begins after it sees it. A claim still in progress may be missed, which
            // is safe: its tree starts nothing before the claim completes, and reads the
            // running-task leases only after (see crate::lease). One round trip instead of a
            // Paxos round on every ownership check.
            select_epoch: prepare(format!(
                "SELECT epoch FROM {ks}.partition_owners WHERE partition_id = ?"
            ))
            .await?,
            // At the claims' serial level (set by `prepare`), for a claim: sees in-progress
            // claims too, so the compare-and-set below rarely loses.
            select_epoch_serial: prepare(format!(
                "SELECT epoch FROM {ks}.partition_owners WHERE partition_id = ?"
            ))
            .await?,
            claim_first: prepare(format!(
                "INSERT INTO {ks}.partition_owners (partition_id, epoch, owner, claimed_at) \
                 VALUES (?, 1, ?, ?) IF NOT EXISTS"
            ))
            .await?,
            claim_next: prepare(format!(
                "UPDATE {ks}.partition_owners SET epoch = ?, owner = ?, claimed_at = ? \
                 WHERE partition_id = ? IF epoch = ?"
            ))
            .await?,
            // A scan of the whole table: one row per partition of the queue's topic.
            select_owners: prepare(format!(
                "SELECT partition_id, epoch, owner, claimed_at FROM {ks}.partition_owners"
            ))
            .await?,
        })
    }
}

impl OwnershipStore for CassandraStore {
    fn claim_partition(
        &self,
        partition: PartitionId,
        owner: String,
        at: DateTime<Utc>,
    ) -> BoxFuture<'static, StoreResult<u64>> {
        let store = self.clone();
        async move {
            for _ in 0..CLAIM_ATTEMPTS {
                let current = store.read_epoch(partition, true).await?;
                let (inner, claim) = (&store.inner, "partition claim");
                let result = if current == 0 {
                    let values = (partition, &owner, at);
                    inner
                        .run(
                            &inner.statements::<OwnershipStatements>().await?.claim_first,
                            values,
                            claim,
                        )
                        .await?
                } else {
                    let (next, current) = (epoch_value(current + 1), epoch_value(current));
                    let values = (next, &owner, at, partition, current);
                    inner
                        .run(
                            &inner.statements::<OwnershipStatements>().await?.claim_next,
                            values,
                            claim,
                        )
                        .await?
                };
                if applied(result, "partition owner")? {
                    return Ok(current + 1);
                }
            }
            Err(StoreError::Contended {
                operation: "partition claim",
                attempts: CLAIM_ATTEMPTS,
            })
        }
        .boxed()
    }

    fn partition_epoch(&self, partition: PartitionId) -> BoxFuture<'static, StoreResult<u64>> {
        self.read_epoch(partition, false)
    }

    fn low_water(
        &self,
        partition: PartitionId,
    ) -> BoxFuture<'static, StoreResult<Option<LowWater>>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let statements = inner.statements::<OwnershipStatements>().await?;
            let statement = &statements.select_low_water;
            let result = inner.run(statement, (partition,), "low-water read").await?;
            let row =
                first_row_of::<(Option<DateTime<Utc>>, Option<String>)>(result, "partition owner")?;
            let Some((Some(at), behind)) = row else {
                return Ok(None);
            };
            let Some(listed) = behind
                .as_deref()
                .map(|t| decode_behind(t, partition))
                .transpose()?
            else {
                let lists = Vec::new();
                return Ok(Some(LowWater {
                    at,
                    behind: None,
                    lists,
                }));
            };
            let (keys, lists) = listed;
            Ok(Some(LowWater {
                at,
                behind: Some(keys),
                lists,
            }))
        }
        .boxed()
    }

    fn set_low_water(
        &self,
        partition: PartitionId,
        epoch: u64,
        at: DateTime<Utc>,
    ) -> BoxFuture<'static, StoreResult<bool>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let values = (at, partition, epoch_value(epoch));
            let statements = inner.statements::<OwnershipStatements>().await?;
            let statement = &statements.set_low_water;
            let result = inner.run(statement, values, "low-water write").await?;
            applied(result, "partition owner")
        }
        .boxed()
    }

    fn advance_low_water(
        &self,
        partition: PartitionId,
        epoch: u64,
        at: DateTime<Utc>,
        behind: Vec<TaskKey>,
        lists: Vec<ListBehind>,
    ) -> BoxFuture<'static, StoreResult<bool>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let listed = encode_behind(&behind, &lists)?;
            let values = (at, listed, partition, epoch_value(epoch));
            let statements = inner.statements::<OwnershipStatements>().await?;
            let statement = &statements.advance_low_water;
            let result = inner.run(statement, values, "low-water write").await?;
            applied(result, "partition owner")
        }
        .boxed()
    }

    fn owners(&self) -> BoxFuture<'static, StoreResult<Vec<PartitionOwner>>> {
        let inner = Arc::clone(&self.inner);
        async move {
            type Row = (
                PartitionId,
                Option<i64>,
                Option<String>,
                Option<DateTime<Utc>>,
            );
            let statements = inner.statements::<OwnershipStatements>().await?;
            let statement = &statements.select_owners;
            let rows: Vec<Row> = inner
                .run_paged(statement, (), "owners read", "partition owner")
                .await?;
            let mut owners = (rows.into_iter())
                .map(|(partition, epoch, owner, claimed_at)| {
                    let epoch = epoch.unwrap_or(0);
                    Ok(PartitionOwner {
                        partition,
                        epoch: u64::try_from(epoch).map_err(|_| StoreError::Corrupt {
                            what: "partition owner",
                            reason: format!("negative epoch {epoch} of partition {partition}"),
                        })?,
                        owner,
                        claimed_at,
                    })
                })
                .collect::<StoreResult<Vec<_>>>()?;
            // Rows come in token order.
            owners.sort_by_key(|o| o.partition);
            Ok(owners)
        }
        .boxed()
    }
}

/// One entry of a low-water mark's list (`behind_mark`, a JSON list): a task, as
/// `[scheduled time in ms, orderingId, uniquenessKey]`, or a deferred-task list the mark passed,
/// as `[from's time in ms, orderingId, from's uniquenessKey, from's enqueue offset, tree]`. A
/// release that knows only tasks refuses a mark naming a list (its tree start fails and is
/// tried again) rather than lose the list's tasks.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
enum Listed {
    Task(i64, String, String),
    List(i64, String, String, i64, String),
}

/// The tasks and deferred-task lists behind a low-water mark, as stored.
fn encode_behind(keys: &[TaskKey], lists: &[ListBehind]) -> StoreResult<String> {
    let tasks = keys.iter().map(|k| {
        let millis = k.scheduled_time.timestamp_millis();
        Listed::Task(millis, k.ordering_id.clone(), k.uniqueness_key.clone())
    });
    let lists = lists.iter().map(|l| {
        let from = &l.from;
        Listed::List(
            from.scheduled_time.timestamp_millis(),
            l.list.ordering_id.clone(),
            from.uniqueness_key.clone(),
            from.enqueue_offset,
            l.list.tree.clone(),
        )
    });
    let listed: Vec<Listed> = tasks.chain(lists).collect();
    serde_json::to_string(&listed).map_err(|e| StoreError::query("low-water write", e))
}

fn decode_behind(
    text: &str,
    partition: PartitionId,
) -> StoreResult<(Vec<TaskKey>, Vec<ListBehind>)> {
    let corrupt = |reason: String| StoreError::Corrupt {
        what: "low-water mark",
        reason,
    };
    let time = |millis: i64| {
        DateTime::<Utc>::from_timestamp_millis(millis)
            .ok_or_else(|| corrupt(format!("time {millis} ms out of range")))
    };
    let listed: Vec<Listed> = serde_json::from_str(text).map_err(|e| corrupt(e.to_string()))?;
    let (mut keys, mut lists) = (Vec::new(), Vec::new());
    for entry in listed {
        match entry {
            Listed::Task(millis, ordering_id, uniqueness_key) => keys.push(TaskKey {
                scheduled_time: time(millis)?,
                ordering_id,
                uniqueness_key,
            }),
            Listed::List(millis, ordering_id, uniqueness_key, enqueue_offset, tree) => {
                lists.push(ListBehind {
                    from: RunOrder {
                        scheduled_time: time(millis)?,
                        enqueue_offset,
                        uniqueness_key,
                    },
                    list: DeferralList {
                        partition,
                        tree,
                        ordering_id,
                    },
                })
            }
        }
    }
    Ok((keys, lists))
}

impl CassandraStore {
    /// The consistency levels and request timeout the driver runs this store's statements
    /// with, read back from the driver (its claims' and ownership checks' statements, prepared
    /// for that if they were not yet).
    pub async fn levels(&self) -> StoreResult<StoreLevels> {
        let statements = self.inner.statements::<OwnershipStatements>().await?;
        Ok(StoreLevels::read(
            &self.inner.session,
            &statements.claim_next,
            &statements.select_epoch,
        ))
    }

    /// The partition's epoch, read serially (`serial`, for a claim) or at the session's
    /// consistency (for ownership checks).
    fn read_epoch(
        &self,
        partition: PartitionId,
        serial: bool,
    ) -> BoxFuture<'static, StoreResult<u64>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let statements = inner.statements::<OwnershipStatements>().await?;
            let statement = if serial {
                &statements.select_epoch_serial
            } else {
                &statements.select_epoch
            };
            let result = inner.run(statement, (partition,), "ownership read").await?;
            let epoch = first_row_of::<(Option<i64>,)>(result, "partition owner")?
                .and_then(|(epoch,)| epoch)
                .unwrap_or(0);
            u64::try_from(epoch).map_err(|_| StoreError::Corrupt {
                what: "partition owner",
                reason: format!("negative epoch {epoch}"),
            })
        }
        .boxed()
    }
}
