//! The statements of the core tables, which every task uses: each table prepares its own (in
//! its module), all of them as the store connects. A feature's table prepares its statements on
//! first use instead (`TableStatements`).

use scylla::client::session::Session;

use crate::settings::SerialConsistencyLevel;
use crate::store::attempts::AttemptStatements;
use crate::store::deferred::DeferredStatements;
use crate::store::leases::LeaseStatements;
use crate::store::ownership::OwnershipStatements;
use crate::store::schedule::ScheduleStatements;
use crate::store::status::StatusStatements;
use crate::store::StoreResult;

/// The core tables' statements, prepared once per session.
pub(in crate::store) struct Statements {
    pub(in crate::store) schedule: ScheduleStatements,
    pub(in crate::store) status: StatusStatements,
    pub(in crate::store) attempts: AttemptStatements,
    pub(in crate::store) ownership: OwnershipStatements,
    pub(in crate::store) leases: LeaseStatements,
    pub(in crate::store) deferred: DeferredStatements,
}

impl Statements {
    /// Prepares them on the tables of keyspace `ks`; ownership claims run at `ownership` (see
    /// `CassandraSettings::ownership_serial_consistency`).
    pub(super) async fn prepare(
        session: &Session,
        ks: &str,
        ownership: SerialConsistencyLevel,
    ) -> StoreResult<Statements> {
        Ok(Statements {
            schedule: ScheduleStatements::prepare(session, ks).await?,
            status: StatusStatements::prepare(session, ks).await?,
            attempts: AttemptStatements::prepare(session, ks).await?,
            ownership: OwnershipStatements::prepare(session, ks, ownership).await?,
            leases: LeaseStatements::prepare(session, ks).await?,
            deferred: DeferredStatements::prepare(session, ks).await?,
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
