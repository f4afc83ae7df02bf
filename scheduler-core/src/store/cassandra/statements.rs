//! The prepared statements of the tables not yet in a file of their own (the schedule, status,
//! attempts, ownership, leases, deferred cancels and identity records); a table moved to its own
//! file prepares its statements there (`TableStatements`).

use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;

use super::levels;
use crate::settings::SerialConsistencyLevel;
use crate::store::{StoreError, StoreResult};

/// Every statement the store runs, prepared once per session.
pub(super) struct Statements {
    /// The schedule's inserts, by what the task carries: a column the task has no value for is
    /// left out, not written null (a null is a tombstone, one per task).
    pub(super) insert_task: TaskInserts,
    pub(super) insert_bucket: PreparedStatement,
    pub(super) select_buckets: PreparedStatement,
    pub(super) forget_bucket_rows: PreparedStatement,
    pub(super) forget_bucket: PreparedStatement,
    pub(super) select_low_water: PreparedStatement,
    pub(super) select_retrying: PreparedStatement,
    pub(super) insert_deferred_cancel: PreparedStatement,
    pub(super) delete_deferred_cancel: PreparedStatement,
    pub(super) select_deferred_cancels: PreparedStatement,
    pub(super) insert_deferred_identity: PreparedStatement,
    pub(super) delete_deferred_identity: PreparedStatement,
    pub(super) select_deferred_identity: PreparedStatement,
    pub(super) set_low_water: PreparedStatement,
    pub(super) advance_low_water: PreparedStatement,
    pub(super) load_from: PreparedStatement,
    pub(super) load_after: PreparedStatement,
    pub(super) delete_task: PreparedStatement,
    pub(super) select_status: PreparedStatement,
    pub(super) select_task: PreparedStatement,
    pub(super) select_attempts: PreparedStatement,
    pub(super) insert_status: PreparedStatement,
    pub(super) cancel_status: PreparedStatement,
    pub(super) delete_status: PreparedStatement,
    pub(super) insert_attempt: PreparedStatement,
    pub(super) select_epoch: PreparedStatement,
    pub(super) select_epoch_serial: PreparedStatement,
    pub(super) claim_first: PreparedStatement,
    pub(super) claim_next: PreparedStatement,
    pub(super) select_owners: PreparedStatement,
    pub(super) insert_lease: PreparedStatement,
    pub(super) delete_lease: PreparedStatement,
    pub(super) select_leases: PreparedStatement,
    pub(super) deferred: super::deferred::DeferredStatements,
}

/// The four inserts of a task into the schedule: with or without a conflict mode
/// (`on_conflict`, `max_wait_ms`), with or without a group (`grouping`).
pub(super) struct TaskInserts {
    pub(super) plain: PreparedStatement,
    pub(super) identity: PreparedStatement,
    pub(super) grouped: PreparedStatement,
    pub(super) grouped_identity: PreparedStatement,
}

impl TaskInserts {
    async fn prepare(session: &Session, ks: &str) -> StoreResult<Self> {
        let prepare = |identity: bool, grouped: bool| {
            let mut columns = "partition_id, hour_bucket, scheduled_time, ordering_id, \
                               uniqueness_key, task_data, enqueue_offset, task_type, priority"
                .to_string();
            let mut count = 9;
            if identity {
                columns.push_str(", on_conflict, max_wait_ms");
                count += 2;
            }
            if grouped {
                columns.push_str(", grouping");
                count += 1;
            }
            let marks = vec!["?"; count].join(", ");
            let cql = format!("INSERT INTO {ks}.scheduled_tasks ({columns}) VALUES ({marks})");
            async move {
                session
                    .prepare(cql)
                    .await
                    .map_err(|e| StoreError::query("prepare insert", e))
            }
        };
        Ok(TaskInserts {
            plain: prepare(false, false).await?,
            identity: prepare(true, false).await?,
            grouped: prepare(false, true).await?,
            grouped_identity: prepare(true, true).await?,
        })
    }
}

impl Statements {
    /// Prepares the statements on the tables of keyspace `ks`; ownership claims run at
    /// `ownership` (see `CassandraSettings::ownership_serial_consistency`).
    pub(super) async fn prepare(
        session: &Session,
        ks: &str,
        ownership: SerialConsistencyLevel,
    ) -> StoreResult<Statements> {
        let mut statements = Statements::prepare_all(session, ks).await?;
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

    async fn prepare_all(session: &Session, ks: &str) -> StoreResult<Statements> {
        let prepare = |cql: String, operation: &'static str| async move {
            session
                .prepare(cql)
                .await
                .map_err(|e| StoreError::query(operation, e))
        };
        let key_columns = "scheduled_time, ordering_id, uniqueness_key";
        let key_match =
            "partition_id = ? AND hour_bucket = ? AND scheduled_time = ? AND ordering_id = ? \
                         AND uniqueness_key = ?";
        let by_key = read_by_key(
            "partition_id = ? AND hour_bucket = ? AND scheduled_time = ? AND ordering_id = ?",
            "uniqueness_key",
            key_columns,
        );
        Ok(Statements {
            insert_task: TaskInserts::prepare(session, ks).await?,
            insert_bucket: prepare(
                format!(
                    "INSERT INTO {ks}.schedule_buckets (partition_id, hour_bucket) VALUES (?, ?)"
                ),
                "prepare bucket index write",
            )
            .await?,
            select_buckets: prepare(
                format!(
                    "SELECT hour_bucket FROM {ks}.schedule_buckets WHERE partition_id = ? \
                     AND hour_bucket >= ? AND hour_bucket < ? LIMIT ?"
                ),
                "prepare bucket index read",
            )
            .await?,
            // A partition-level delete: one tombstone for the whole hour, whatever it held.
            forget_bucket_rows: prepare(
                format!(
                    "DELETE FROM {ks}.scheduled_tasks USING TIMESTAMP ? \
                     WHERE partition_id = ? AND hour_bucket = ?"
                ),
                "prepare bucket delete",
            )
            .await?,
            forget_bucket: prepare(
                format!(
                    "DELETE FROM {ks}.schedule_buckets USING TIMESTAMP ? \
                     WHERE partition_id = ? AND hour_bucket = ?"
                ),
                "prepare bucket delete",
            )
            .await?,
            select_retrying: prepare(
                format!("SELECT {key_columns} FROM {ks}.retrying_tasks WHERE partition_id = ?"),
                "prepare retrying read",
            )
            .await?,
            insert_deferred_cancel: prepare(
                format!(
                    "INSERT INTO {ks}.deferred_cancels (partition_id, {key_columns}, \
                     cancelled_at) VALUES (?, ?, ?, ?, ?)"
                ),
                "prepare deferred cancel write",
            )
            .await?,
            delete_deferred_cancel: prepare(
                format!(
                    "DELETE FROM {ks}.deferred_cancels WHERE partition_id = ? \
                     AND scheduled_time = ? AND ordering_id = ? AND uniqueness_key = ?"
                ),
                "prepare deferred cancel delete",
            )
            .await?,
            select_deferred_cancels: prepare(
                format!(
                    "SELECT {key_columns}, cancelled_at FROM {ks}.deferred_cancels \
                     WHERE partition_id = ?"
                ),
                "prepare deferred cancels read",
            )
            .await?,
            insert_deferred_identity: prepare(
                format!(
                    "INSERT INTO {ks}.deferred_identity_records (partition_id, ordering_id, \
                     record_offset, record, trace_parent) VALUES (?, ?, ?, ?, ?)"
                ),
                "prepare deferred identity record write",
            )
            .await?,
            delete_deferred_identity: prepare(
                format!(
                    "DELETE FROM {ks}.deferred_identity_records WHERE partition_id = ? \
                     AND ordering_id = ? AND record_offset = ?"
                ),
                "prepare deferred identity record delete",
            )
            .await?,
            select_deferred_identity: prepare(
                format!(
                    "SELECT ordering_id, record_offset, record, trace_parent \
                     FROM {ks}.deferred_identity_records WHERE partition_id = ?"
                ),
                "prepare deferred identity records read",
            )
            .await?,
            select_low_water: prepare(
                format!(
                    "SELECT low_water, behind_mark FROM {ks}.partition_owners \
                     WHERE partition_id = ?"
                ),
                "prepare low-water read",
            )
            .await?,
            set_low_water: prepare(
                format!(
                    "UPDATE {ks}.partition_owners SET low_water = ? WHERE partition_id = ? \
                     IF epoch = ?"
                ),
                "prepare low-water write",
            )
            .await?,
            advance_low_water: prepare(
                format!(
                    "UPDATE {ks}.partition_owners SET low_water = ?, behind_mark = ? \
                     WHERE partition_id = ? IF epoch = ?"
                ),
                "prepare low-water advance",
            )
            .await?,
            load_from: prepare(
                format!(
                    "SELECT {key_columns}, task_data, enqueue_offset, task_type, priority, on_conflict, max_wait_ms, grouping FROM {ks}.scheduled_tasks \
                     WHERE partition_id = ? AND hour_bucket = ? AND (scheduled_time) >= (?) \
                     AND (scheduled_time) < (?) LIMIT ?"
                ),
                "prepare load",
            )
            .await?,
            load_after: prepare(
                format!(
                    "SELECT {key_columns}, task_data, enqueue_offset, task_type, priority, on_conflict, max_wait_ms, grouping FROM {ks}.scheduled_tasks \
                     WHERE partition_id = ? AND hour_bucket = ? AND ({key_columns}) > (?, ?, ?) \
                     AND (scheduled_time) < (?) LIMIT ?"
                ),
                "prepare load",
            )
            .await?,
            delete_task: prepare(
                format!("DELETE FROM {ks}.scheduled_tasks WHERE {key_match}"),
                "prepare delete",
            )
            .await?,
            select_status: prepare(
                format!("SELECT uniqueness_key, status, attempts, updated_at, last_error, result FROM {ks}.task_status WHERE {by_key}"),
                "prepare status read",
            )
            .await?,
            select_task: prepare(
                format!("SELECT uniqueness_key, task_data, enqueue_offset, task_type, priority, on_conflict, max_wait_ms, grouping FROM {ks}.scheduled_tasks WHERE {by_key}"),
                "prepare task read",
            )
            .await?,
            select_attempts: prepare(
                format!(
                    "SELECT attempt, started_at, finished_at, outcome, error FROM {ks}.task_attempts \
                     WHERE scheduled_time = ? AND ordering_id = ? AND uniqueness_key = ? LIMIT ?"
                ),
                "prepare attempts read",
            )
            .await?,
            insert_status: prepare(
                format!(
                    "INSERT INTO {ks}.task_status (partition_id, hour_bucket, {key_columns}, status, attempts, \
                     updated_at, last_error, result) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                ),
                "prepare status write",
            )
            .await?,
            cancel_status: prepare(
                format!(
                    "INSERT INTO {ks}.task_status (partition_id, hour_bucket, {key_columns}, status, attempts, \
                     updated_at) VALUES (?, ?, ?, ?, ?, 'cancelled', 0, ?) IF NOT EXISTS"
                ),
                "prepare cancel",
            )
            .await?,
            delete_status: prepare(
                format!("DELETE FROM {ks}.task_status WHERE {key_match}"),
                "prepare status delete",
            )
            .await?,
            insert_attempt: prepare(
                format!(
                    "INSERT INTO {ks}.task_attempts ({key_columns}, attempt, partition_id, started_at, \
                     finished_at, outcome, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                ),
                "prepare attempt write",
            )
            .await?,
            // At the session's consistency (LOCAL_QUORUM; QUORUM when claims are SERIAL): a
            // claim whose lightweight transaction
            // completed was committed at that level, so a read that begins after it sees it. A
            // claim still in progress may be missed, which is safe: its tree starts nothing
            // before the claim completes, and reads the running-task leases only after (see
            // crate::lease). One round trip instead of a Paxos round on every ownership check.
            select_epoch: prepare(
                format!("SELECT epoch FROM {ks}.partition_owners WHERE partition_id = ?"),
                "prepare epoch read",
            )
            .await?,
            // At the claims' serial level (set by `prepare`), for a claim: sees in-progress
            // claims too, so the compare-and-set below rarely loses.
            select_epoch_serial: prepare(
                format!("SELECT epoch FROM {ks}.partition_owners WHERE partition_id = ?"),
                "prepare epoch read",
            )
            .await?,
            claim_first: prepare(
                format!(
                    "INSERT INTO {ks}.partition_owners (partition_id, epoch, owner, claimed_at) \
                     VALUES (?, 1, ?, ?) IF NOT EXISTS"
                ),
                "prepare partition claim",
            )
            .await?,
            claim_next: prepare(
                format!(
                    "UPDATE {ks}.partition_owners SET epoch = ?, owner = ?, claimed_at = ? \
                     WHERE partition_id = ? IF epoch = ?"
                ),
                "prepare partition claim",
            )
            .await?,
            // A scan of the whole table: one row per partition of the queue's topic.
            select_owners: prepare(
                format!("SELECT partition_id, epoch, owner, claimed_at FROM {ks}.partition_owners"),
                "prepare owners read",
            )
            .await?,
            insert_lease: prepare(
                format!(
                    "INSERT INTO {ks}.task_leases (partition_id, holder, node, epoch, running) \
                     VALUES (?, ?, ?, ?, ?) USING TTL ?"
                ),
                "prepare lease write",
            )
            .await?,
            delete_lease: prepare(
                format!("DELETE FROM {ks}.task_leases WHERE partition_id = ? AND holder = ?"),
                "prepare lease delete",
            )
            .await?,
            select_leases: prepare(
                format!(
                    "SELECT holder, node, epoch, running FROM {ks}.task_leases WHERE partition_id = ?"
                ),
                "prepare lease read",
            )
            .await?,
            deferred: super::deferred::DeferredStatements::prepare(session, ks).await?,
        })
    }
}

/// The clause of a read of one row by its key: `prefix`, equalities on the partition key and the
/// clustering columns before `last` (and, where `last` is the only clustering column, a lower
/// bound on it), then `last` up to the key's, newest first, one row. Its values are the key's,
/// in order (with the lower bound before `last`'s value).
///
/// Cassandra 2.1.0 answers a slice whose lower bound is exactly a deleted row's key, as
/// `… AND last = ?` is, with the row, once the row and its tombstone sit in different sstables
/// or memtables (`it-tests/tests/read_after_delete.rs`). This read's lower bound is the key's
/// prefix, which it never equals; it runs down from the key and takes one row: the key's or,
/// when that is gone, a neighbour below it, which the caller drops by comparing `last`. It steps
/// over the tombstones of the rows between them at most (design.md, "Reads by key").
pub(in crate::store) fn read_by_key(prefix: &str, last: &str, clustering_columns: &str) -> String {
    let descending = clustering_columns
        .split(',')
        .map(|column| format!("{} DESC", column.trim()))
        .collect::<Vec<_>>()
        .join(", ");
    format!("{prefix} AND {last} <= ? ORDER BY {descending} LIMIT 1")
}
