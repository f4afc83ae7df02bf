//! Per-key permits across the cluster (`key_permits`, `key_permit_holders`): how many of each
//! limit key's `key_concurrency` permits each holder (a queue's gate on one node process) has
//! taken, changed only by lightweight transactions on the key's version; and the holders alive,
//! each row kept by its holder's heartbeat and gone with its TTL. A holder's permits count while
//! its heartbeat row lives; a dead holder's return with it (see `crate::limits`).
//!
//! The whole table in one place: its rows and [`PermitStore`], its statements and implementation
//! on Cassandra (`cassandra`), its in-memory twin (`memory`).

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::BoxFuture;

use super::StoreResult;

/// The most holders one read of `key_permit_holders` returns: a queue's gate on each node
/// process, and the holders of the last `lease_ttl` (a holder whose heartbeat lapsed takes a new
/// name). Far beyond any cluster.
pub const MAX_HOLDERS: usize = 1_000;

/// A limit key's permits taken: by holder, as of `version`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyHolders {
    /// Bumped by every change (the lightweight transactions' condition).
    pub version: i64,
    /// Permits taken, by holder: holders with at least one, and wants (a holder with none,
    /// whose tasks wait for units of a key's rate; see `crate::limits`).
    pub holders: BTreeMap<String, u32>,
}

/// The permits of limit keys, and the holders alive (`key_permits`, `key_permit_holders`).
pub trait PermitStore: Send + Sync + 'static {
    /// Writes (or renews) `holder`'s heartbeat row, alive for `ttl`.
    fn beat(&self, holder: String, ttl: Duration) -> BoxFuture<'static, StoreResult<()>>;

    /// The holders whose heartbeat row is alive (at most [`MAX_HOLDERS`]).
    fn live_holders(&self) -> BoxFuture<'static, StoreResult<Vec<String>>>;

    /// The permits taken of `key` in `scope` (`None`: none).
    fn key_holders(
        &self,
        scope: String,
        key: String,
    ) -> BoxFuture<'static, StoreResult<Option<KeyHolders>>>;

    /// Sets the permits taken of `key` in `scope` to `holders` if they are still at `expected`'s
    /// version (`None`: if none are taken), as one lightweight transaction: whether it applied.
    /// No holder left removes the key's row.
    fn swap_key_holders(
        &self,
        scope: String,
        key: String,
        expected: Option<i64>,
        holders: BTreeMap<String, u32>,
    ) -> BoxFuture<'static, StoreResult<bool>>;
}

/// `key_permits` and `key_permit_holders` on Cassandra: a row per key, a JSON map of holders and
/// a version, changed by lightweight transactions at the ownership claims' serial level; one
/// partition of heartbeat rows written with a TTL.
#[cfg(feature = "node")]
mod cassandra {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::time::Duration;

    use chrono::Utc;
    use futures::future::BoxFuture;
    use futures::FutureExt;
    use scylla::statement::prepared::PreparedStatement;

    use super::{KeyHolders, PermitStore, MAX_HOLDERS};
    use crate::store::cassandra::rows::{applied, first_row_of, rows_of};
    use crate::store::cassandra::{levels, CassandraStore, Preparing, TableStatements};
    use crate::store::{StoreError, StoreResult};

    /// The statements of `key_permits` and `key_permit_holders`.
    struct PermitStatements {
        beat: PreparedStatement,
        live: PreparedStatement,
        select: PreparedStatement,
        insert: PreparedStatement,
        update: PreparedStatement,
        delete: PreparedStatement,
    }

    impl TableStatements for PermitStatements {
        async fn prepare(on: &Preparing<'_>) -> StoreResult<Self> {
            let ks = on.keyspace;
            let prepare = |cql: String| on.prepare("prepare permit statement", cql);
            let mut statements = PermitStatements {
                beat: prepare(format!(
                    "INSERT INTO {ks}.key_permit_holders (shard, holder, beat_at) \
                     VALUES (0, ?, ?) USING TTL ?"
                ))
                .await?,
                live: prepare(format!(
                    "SELECT holder FROM {ks}.key_permit_holders WHERE shard = 0 \
                     LIMIT {MAX_HOLDERS}"
                ))
                .await?,
                select: prepare(format!(
                    "SELECT version, holders FROM {ks}.key_permits \
                     WHERE scope = ? AND limit_key = ?"
                ))
                .await?,
                insert: prepare(format!(
                    "INSERT INTO {ks}.key_permits (scope, limit_key, version, holders) \
                     VALUES (?, ?, 1, ?) IF NOT EXISTS"
                ))
                .await?,
                update: prepare(format!(
                    "UPDATE {ks}.key_permits SET version = ?, holders = ? \
                     WHERE scope = ? AND limit_key = ? IF version = ?"
                ))
                .await?,
                delete: prepare(format!(
                    "DELETE FROM {ks}.key_permits WHERE scope = ? AND limit_key = ? \
                     IF version = ?"
                ))
                .await?,
            };
            for swap in [
                &mut statements.insert,
                &mut statements.update,
                &mut statements.delete,
            ] {
                swap.set_serial_consistency(Some(levels::serial(on.ownership)));
            }
            Ok(statements)
        }
    }

    fn encode(holders: &BTreeMap<String, u32>) -> StoreResult<String> {
        serde_json::to_string(holders).map_err(|e| StoreError::query("key permits write", e))
    }

    impl PermitStore for CassandraStore {
        fn beat(&self, holder: String, ttl: Duration) -> BoxFuture<'static, StoreResult<()>> {
            let inner = Arc::clone(&self.inner);
            async move {
                // Whole seconds, rounded up, never "no TTL" (the settings keep it small).
                let ttl = i32::try_from(ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0))
                    .unwrap_or(i32::MAX)
                    .max(1);
                let statements = inner.statements::<PermitStatements>().await?;
                let values = (holder, Utc::now(), ttl);
                (inner
                    .run(&statements.beat, values, "permit holder beat")
                    .await)
                    .map(|_| ())
            }
            .boxed()
        }

        fn live_holders(&self) -> BoxFuture<'static, StoreResult<Vec<String>>> {
            let inner = Arc::clone(&self.inner);
            async move {
                let statements = inner.statements::<PermitStatements>().await?;
                let result = inner
                    .run(&statements.live, (), "permit holders read")
                    .await?;
                let rows = rows_of::<(String,)>(result, "key permit holder")?;
                Ok(rows.into_iter().map(|(holder,)| holder).collect())
            }
            .boxed()
        }

        fn key_holders(
            &self,
            scope: String,
            key: String,
        ) -> BoxFuture<'static, StoreResult<Option<KeyHolders>>> {
            let inner = Arc::clone(&self.inner);
            async move {
                let statements = inner.statements::<PermitStatements>().await?;
                let values = (scope, key);
                let result = inner
                    .run(&statements.select, values, "key permits read")
                    .await?;
                let row = first_row_of::<(Option<i64>, Option<String>)>(result, "key permits")?;
                let Some((version, holders)) = row else {
                    return Ok(None);
                };
                let holders = match holders.as_deref() {
                    None | Some("") => BTreeMap::new(),
                    Some(text) => serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
                        what: "key permits",
                        reason: e.to_string(),
                    })?,
                };
                Ok(Some(KeyHolders {
                    version: version.unwrap_or(0),
                    holders,
                }))
            }
            .boxed()
        }

        fn swap_key_holders(
            &self,
            scope: String,
            key: String,
            expected: Option<i64>,
            holders: BTreeMap<String, u32>,
        ) -> BoxFuture<'static, StoreResult<bool>> {
            let inner = Arc::clone(&self.inner);
            async move {
                let statements = inner.statements::<PermitStatements>().await?;
                let operation = "key permits write";
                let result = match expected {
                    None if holders.is_empty() => return Ok(true),
                    None => {
                        let values = (scope, key, encode(&holders)?);
                        inner.run(&statements.insert, values, operation).await?
                    }
                    Some(version) if holders.is_empty() => {
                        let values = (scope, key, version);
                        inner.run(&statements.delete, values, operation).await?
                    }
                    Some(version) => {
                        let next = version.checked_add(1).ok_or_else(|| {
                            StoreError::refused(operation, "the key's version is at its largest")
                        })?;
                        let values = (next, encode(&holders)?, scope, key, version);
                        inner.run(&statements.update, values, operation).await?
                    }
                };
                applied(result, "key permits")
            }
            .boxed()
        }
    }
}

/// The permits in memory: a holder's heartbeat row lives until its TTL on tokio's clock (as
/// Cassandra's TTL), and its expired rows are tombstones every read of the holders steps over;
/// a key's row removed leaves a tombstone its next read steps over.
#[cfg(any(test, feature = "testing"))]
mod memory {
    use std::collections::{BTreeMap, BTreeSet};
    use std::time::Duration;

    use futures::future::BoxFuture;
    use futures::FutureExt;
    use tokio::time::Instant;

    use super::{KeyHolders, PermitStore, MAX_HOLDERS};
    use crate::store::memory::MemoryStore;
    use crate::store::StoreResult;

    /// The tables' rows.
    #[derive(Default)]
    struct Permits {
        /// Heartbeat rows, with when each expires.
        holders: BTreeMap<String, Instant>,
        /// Keys' rows, by scope and key.
        keys: BTreeMap<(String, String), KeyHolders>,
        /// Removed keys' rows (a tombstone each).
        removed: BTreeSet<(String, String)>,
    }

    impl PermitStore for MemoryStore {
        fn beat(&self, holder: String, ttl: Duration) -> BoxFuture<'static, StoreResult<()>> {
            let expires = Instant::now() + ttl;
            self.run("permit holder beat", move |s| {
                s.table::<Permits>().holders.insert(holder, expires);
            })
        }

        fn live_holders(&self) -> BoxFuture<'static, StoreResult<Vec<String>>> {
            let now = Instant::now();
            read_stepping(self, "permit holders read", move |permits| {
                let (live, expired): (Vec<_>, Vec<_>) =
                    (permits.holders.iter()).partition(|(_, expires)| **expires > now);
                let live: Vec<String> = (live.into_iter())
                    .take(MAX_HOLDERS)
                    .map(|(holder, _)| holder.clone())
                    .collect();
                (live, expired.len())
            })
        }

        fn key_holders(
            &self,
            scope: String,
            key: String,
        ) -> BoxFuture<'static, StoreResult<Option<KeyHolders>>> {
            read_stepping(self, "key permits read", move |permits| {
                let id = (scope, key);
                let tombstone = usize::from(permits.removed.contains(&id));
                (permits.keys.get(&id).cloned(), tombstone)
            })
        }

        fn swap_key_holders(
            &self,
            scope: String,
            key: String,
            expected: Option<i64>,
            holders: BTreeMap<String, u32>,
        ) -> BoxFuture<'static, StoreResult<bool>> {
            self.run("key permits write", move |s| {
                let permits = s.table::<Permits>();
                let id = (scope, key);
                let current = permits.keys.get(&id).map(|k| k.version);
                if current != expected {
                    return false;
                }
                if holders.is_empty() {
                    if permits.keys.remove(&id).is_some() {
                        permits.removed.insert(id);
                    }
                } else {
                    let version = expected.unwrap_or(0) + 1;
                    permits.keys.insert(id, KeyHolders { version, holders });
                }
                true
            })
        }
    }

    /// `read` as `operation`, which steps over the tombstones it counts, as the store counts
    /// them (and refuses past Cassandra's threshold).
    fn read_stepping<T: Send + 'static>(
        store: &MemoryStore,
        operation: &'static str,
        read: impl FnOnce(&mut Permits) -> (T, usize) + Send + 'static,
    ) -> BoxFuture<'static, StoreResult<T>> {
        store
            .run(operation, move |s| {
                let (value, stepped_over) = read(s.table::<Permits>());
                s.step_over_tombstones(operation, stepped_over)
                    .map(|()| value)
            })
            .map(|answer| answer.and_then(|read| read))
            .boxed()
    }
}
