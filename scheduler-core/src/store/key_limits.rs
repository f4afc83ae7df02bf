//! Per-key limit overrides (`key_limits`): limits an operator set at run time for one limit key
//! (of a task type, or of the queue), over the ones the settings give every key. One small
//! partition per keyspace that every node polls, like the suspensions.
//!
//! The whole table in one place: its rows and [`KeyLimitStore`], its statements and
//! implementation on Cassandra (`cassandra`), its in-memory twin (`memory`).

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use super::StoreResult;

/// The most overrides a node reads (and the admin API accepts).
pub const MAX_KEY_LIMITS: usize = 10_000;

/// What an override sets for its key: each value set replaces the settings' (a value not set
/// keeps theirs).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LimitValues {
    /// Calls at once across the cluster (`key_concurrency`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// Starts a second (`key_rate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// Starts at once (`key_burst`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
    /// Its share of the executor's slots when tasks wait for them, against 1 for a key without
    /// one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
}

/// One override.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyLimit {
    /// The task type whose tasks of the key it limits; `None`: the queue's (every type without
    /// an override of its own for the key).
    pub task_type: Option<String>,
    /// The limit key.
    pub limit_key: String,
    /// What it sets.
    pub values: LimitValues,
    /// When it was last set.
    pub updated_at: DateTime<Utc>,
}

/// The overrides (`key_limits`).
pub trait KeyLimitStore: Send + Sync + 'static {
    /// Every override (at most [`MAX_KEY_LIMITS`]).
    fn key_limits(&self) -> BoxFuture<'static, StoreResult<Vec<KeyLimit>>>;

    /// Sets `limit` (replacing the key's earlier one, if any).
    fn set_key_limit(&self, limit: KeyLimit) -> BoxFuture<'static, StoreResult<()>>;

    /// Removes the override of `limit_key` for `task_type` (none: the queue's), if any.
    fn remove_key_limit(
        &self,
        task_type: Option<String>,
        limit_key: String,
    ) -> BoxFuture<'static, StoreResult<()>>;
}

/// The stored scope of an override: its task type, or `*` for the queue's.
fn scope_of(task_type: &Option<String>) -> String {
    task_type.clone().unwrap_or_else(|| "*".to_string())
}

fn task_type_of(scope: String) -> Option<String> {
    (scope != "*").then_some(scope)
}

/// `key_limits` on Cassandra: one partition (shard 0), a row per override, its values as JSON
/// in one cell (so a row replaced leaves no null cells behind); read whole.
#[cfg(feature = "node")]
mod cassandra {
    use std::sync::Arc;

    use chrono::{DateTime, Utc};
    use futures::future::BoxFuture;
    use futures::FutureExt;
    use scylla::statement::prepared::PreparedStatement;

    use super::{scope_of, task_type_of, KeyLimit, KeyLimitStore, LimitValues, MAX_KEY_LIMITS};
    use crate::store::cassandra::rows::rows_of;
    use crate::store::cassandra::{CassandraStore, Preparing, TableStatements};
    use crate::store::{StoreError, StoreResult};

    /// The statements of `key_limits`.
    struct KeyLimitStatements {
        select: PreparedStatement,
        insert: PreparedStatement,
        delete: PreparedStatement,
    }

    impl TableStatements for KeyLimitStatements {
        async fn prepare(on: &Preparing<'_>) -> StoreResult<Self> {
            let ks = on.keyspace;
            let prepare = |cql: String| on.prepare("prepare key limit statement", cql);
            Ok(KeyLimitStatements {
                select: prepare(format!(
                    "SELECT scope, limit_key, limits, updated_at FROM {ks}.key_limits \
                     WHERE shard = 0 LIMIT {MAX_KEY_LIMITS}"
                ))
                .await?,
                insert: prepare(format!(
                    "INSERT INTO {ks}.key_limits (shard, scope, limit_key, limits, updated_at) \
                     VALUES (0, ?, ?, ?, ?)"
                ))
                .await?,
                delete: prepare(format!(
                    "DELETE FROM {ks}.key_limits WHERE shard = 0 AND scope = ? AND limit_key = ?"
                ))
                .await?,
            })
        }
    }

    impl KeyLimitStore for CassandraStore {
        fn key_limits(&self) -> BoxFuture<'static, StoreResult<Vec<KeyLimit>>> {
            let inner = Arc::clone(&self.inner);
            async move {
                let statements = inner.statements::<KeyLimitStatements>().await?;
                let result = inner.run(&statements.select, (), "key limits read").await?;
                type Row = (String, String, Option<String>, Option<DateTime<Utc>>);
                let rows = rows_of::<Row>(result, "key limit")?;
                rows.into_iter()
                    .map(|(scope, limit_key, limits, updated_at)| {
                        let values: LimitValues = match limits.as_deref() {
                            None | Some("") => LimitValues::default(),
                            Some(text) => {
                                serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
                                    what: "key limit",
                                    reason: e.to_string(),
                                })?
                            }
                        };
                        Ok(KeyLimit {
                            task_type: task_type_of(scope),
                            limit_key,
                            values,
                            updated_at: updated_at.unwrap_or_default(),
                        })
                    })
                    .collect()
            }
            .boxed()
        }

        fn set_key_limit(&self, limit: KeyLimit) -> BoxFuture<'static, StoreResult<()>> {
            let inner = Arc::clone(&self.inner);
            async move {
                let values = serde_json::to_string(&limit.values)
                    .map_err(|e| StoreError::query("key limit write", e))?;
                let statements = inner.statements::<KeyLimitStatements>().await?;
                let row = (
                    scope_of(&limit.task_type),
                    limit.limit_key,
                    values,
                    limit.updated_at,
                );
                (inner.run(&statements.insert, row, "key limit write").await).map(|_| ())
            }
            .boxed()
        }

        fn remove_key_limit(
            &self,
            task_type: Option<String>,
            limit_key: String,
        ) -> BoxFuture<'static, StoreResult<()>> {
            let inner = Arc::clone(&self.inner);
            async move {
                let statements = inner.statements::<KeyLimitStatements>().await?;
                let key = (scope_of(&task_type), limit_key);
                (inner.run(&statements.delete, key, "key limit delete").await).map(|_| ())
            }
            .boxed()
        }
    }
}

/// `key_limits` in memory: every read steps over the removed overrides' tombstones.
#[cfg(any(test, feature = "testing"))]
mod memory {
    use std::collections::{BTreeMap, BTreeSet};

    use futures::future::BoxFuture;
    use futures::FutureExt;

    use super::{scope_of, KeyLimit, KeyLimitStore, MAX_KEY_LIMITS};
    use crate::store::memory::MemoryStore;
    use crate::store::StoreResult;

    #[derive(Default)]
    struct KeyLimits {
        rows: BTreeMap<(String, String), KeyLimit>,
        removed: BTreeSet<(String, String)>,
    }

    impl KeyLimitStore for MemoryStore {
        fn key_limits(&self) -> BoxFuture<'static, StoreResult<Vec<KeyLimit>>> {
            self.run("key limits read", |s| {
                let table = s.table::<KeyLimits>();
                let rows: Vec<KeyLimit> =
                    table.rows.values().take(MAX_KEY_LIMITS).cloned().collect();
                let stepped_over = table.removed.len();
                s.step_over_tombstones("key limits read", stepped_over)
                    .map(|()| rows)
            })
            .map(|answer| answer.and_then(|read| read))
            .boxed()
        }

        fn set_key_limit(&self, limit: KeyLimit) -> BoxFuture<'static, StoreResult<()>> {
            self.run("key limit write", move |s| {
                let key = (scope_of(&limit.task_type), limit.limit_key.clone());
                let table = s.table::<KeyLimits>();
                table.removed.remove(&key);
                table.rows.insert(key, limit);
            })
        }

        fn remove_key_limit(
            &self,
            task_type: Option<String>,
            limit_key: String,
        ) -> BoxFuture<'static, StoreResult<()>> {
            self.run("key limit delete", move |s| {
                let key = (scope_of(&task_type), limit_key);
                let table = s.table::<KeyLimits>();
                table.rows.remove(&key);
                table.removed.insert(key);
            })
        }
    }
}
