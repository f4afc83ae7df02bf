//! [`DeferredStore`] on Cassandra: `deferred_tasks`, one partition per tree of a Kafka partition
//! (`(partition_id, tree)`), clustered by orderingId and run order, so that a read-back is a
//! slice of one orderingId's rows from where it stands (the rows it read before, deleted, lie
//! before the slice and are never stepped over). Rows are written with a TTL
//! ([`DEFERRED_LIST_RETENTION`], within what Cassandra keeps: `store::ttl`).

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use scheduler_client::RunOrder;
use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::prepared::PreparedStatement;

use crate::store::cassandra::rows::{limit_value, rows_of};
use crate::store::cassandra::{CassandraStore, Preparing, TableStatements};
use crate::store::deferred::{DeferralList, DeferredStore, DEFERRED_LIST_RETENTION};
use crate::store::ttl::Retention;
use crate::store::{PartitionId, StoreResult};

/// The rows of one write or delete batch at most (one mutation of one partition each).
const BATCH_ROWS: usize = 500;

/// The statements of the deferred-task lists.
struct DeferredStatements {
    insert: PreparedStatement,
    select_from: PreparedStatement,
    delete: PreparedStatement,
    drop_lists: PreparedStatement,
}

impl TableStatements for DeferredStatements {
    async fn prepare(on: &Preparing<'_>) -> StoreResult<Self> {
        let ks = on.keyspace;
        let prepare = |cql: String| on.prepare("prepare deferred-task lists", cql);
        let list = "partition_id = ? AND tree = ? AND ordering_id = ?";
        Ok(DeferredStatements {
            insert: prepare(format!(
                "INSERT INTO {ks}.deferred_tasks (partition_id, tree, ordering_id, \
                 scheduled_time, enqueue_offset, uniqueness_key) VALUES (?, ?, ?, ?, ?, ?) \
                 USING TTL ?"
            ))
            .await?,
            // One orderingId's rows from a run order on: the slice's bounds are tuples (Cassandra
            // 2.1 cannot mix an equality on `ordering_id` with a tuple after it). The lower bound
            // is a row's run order only for a row not read yet (later reads start at a
            // successor); were that row deleted, Cassandra 2.1.0 could still return it (see
            // `statements::read_by_key`), and the read-back, reading each listed task by key,
            // finds no task for it.
            select_from: prepare(format!(
                "SELECT scheduled_time, enqueue_offset, uniqueness_key FROM {ks}.deferred_tasks \
                 WHERE partition_id = ? AND tree = ? AND (ordering_id, scheduled_time, \
                 enqueue_offset, uniqueness_key) >= (?, ?, ?, ?) AND (ordering_id) <= (?) LIMIT ?"
            ))
            .await?,
            delete: prepare(format!(
                "DELETE FROM {ks}.deferred_tasks WHERE {list} AND scheduled_time = ? \
                 AND enqueue_offset = ? AND uniqueness_key = ?"
            ))
            .await?,
            drop_lists: prepare(format!(
                "DELETE FROM {ks}.deferred_tasks WHERE partition_id = ? AND tree = ?"
            ))
            .await?,
        })
    }
}

/// One row's values: the list's key, then the run order.
type RowValues<'a> = (
    PartitionId,
    &'a str,
    &'a str,
    chrono::DateTime<chrono::Utc>,
    i64,
    &'a str,
);

fn row_values<'a>(list: &'a DeferralList, run: &'a RunOrder) -> RowValues<'a> {
    (
        list.partition,
        &list.tree,
        &list.ordering_id,
        run.scheduled_time,
        run.enqueue_offset,
        &run.uniqueness_key,
    )
}

impl CassandraStore {
    /// Runs `statement` for each of `tasks` in `list`, in unlogged batches of one partition.
    async fn run_on_rows<V: scylla::serialize::row::SerializeRow>(
        &self,
        statement: &PreparedStatement,
        tasks: &[RunOrder],
        values_of: impl Fn(&RunOrder) -> V,
        operation: &'static str,
    ) -> StoreResult<()> {
        for chunk in tasks.chunks(BATCH_ROWS) {
            let mut batch = Batch::new(BatchType::Unlogged);
            let mut values = Vec::with_capacity(chunk.len());
            for run in chunk {
                batch.append_statement(statement.clone());
                values.push(values_of(run));
            }
            self.inner.run_batch(&batch, values, operation).await?;
        }
        Ok(())
    }
}

impl DeferredStore for CassandraStore {
    fn list_deferred(
        &self,
        list: DeferralList,
        tasks: Vec<RunOrder>,
    ) -> BoxFuture<'static, StoreResult<()>> {
        let store = self.clone();
        async move {
            let now = chrono::Utc::now();
            let ttl = Retention::after(now, DEFERRED_LIST_RETENTION).ttl_secs(now);
            let statements = store.inner.statements::<DeferredStatements>().await?;
            let insert = &statements.insert;
            let values = |run: &RunOrder| {
                let (p, tree, ordering, time, offset, unique) = row_values(&list, run);
                (
                    p,
                    tree.to_string(),
                    ordering.to_string(),
                    time,
                    offset,
                    unique.to_string(),
                    ttl,
                )
            };
            store
                .run_on_rows(insert, &tasks, values, "deferred list write")
                .await
        }
        .boxed()
    }

    fn listed_deferred(
        &self,
        list: DeferralList,
        from: RunOrder,
        limit: usize,
    ) -> BoxFuture<'static, StoreResult<Vec<RunOrder>>> {
        let inner = Arc::clone(&self.inner);
        async move {
            // Cassandra refuses `LIMIT 0`.
            if limit == 0 {
                return Ok(Vec::new());
            }
            let (p, tree, ordering, time, offset, unique) = row_values(&list, &from);
            let values = (
                p,
                tree,
                ordering,
                time,
                offset,
                unique,
                ordering,
                limit_value(limit),
            );
            let result = inner
                .run(
                    &inner.statements::<DeferredStatements>().await?.select_from,
                    values,
                    "deferred list read",
                )
                .await?;
            type Row = (chrono::DateTime<chrono::Utc>, i64, String);
            Ok(rows_of::<Row>(result, "deferred task")?
                .into_iter()
                .map(
                    |(scheduled_time, enqueue_offset, uniqueness_key)| RunOrder {
                        scheduled_time,
                        enqueue_offset,
                        uniqueness_key,
                    },
                )
                .collect())
        }
        .boxed()
    }

    fn unlist_deferred(
        &self,
        list: DeferralList,
        tasks: Vec<RunOrder>,
    ) -> BoxFuture<'static, StoreResult<()>> {
        let store = self.clone();
        async move {
            let statements = store.inner.statements::<DeferredStatements>().await?;
            let delete = &statements.delete;
            let values = |run: &RunOrder| {
                let (p, tree, ordering, time, offset, unique) = row_values(&list, run);
                (
                    p,
                    tree.to_string(),
                    ordering.to_string(),
                    time,
                    offset,
                    unique.to_string(),
                )
            };
            store
                .run_on_rows(delete, &tasks, values, "deferred list delete")
                .await
        }
        .boxed()
    }

    fn drop_deferral_lists(
        &self,
        partition: PartitionId,
        tree: String,
    ) -> BoxFuture<'static, StoreResult<()>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let statements = inner.statements::<DeferredStatements>().await?;
            let drop_lists = &statements.drop_lists;
            inner
                .run(drop_lists, (partition, &tree), "deferred lists delete")
                .await?;
            Ok(())
        }
        .boxed()
    }
}
