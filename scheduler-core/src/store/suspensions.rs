//! Suspensions (`suspensions`): what an operator suspended (an orderingId, a task type, or a
//! group), kept in one small Cassandra partition per keyspace that every node polls. A
//! suspended task waits, pending, without an attempt, until its suspension is lifted.
//!
//! The whole table in one place: its rows and [`SuspensionStore`], its statements and
//! implementation on Cassandra (`cassandra`), its in-memory twin (`memory`).

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use scheduler_client::Task;
use serde::{Deserialize, Serialize};

use super::StoreResult;

/// What a suspension holds back.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", content = "target", rename_all = "camelCase")]
pub enum SuspensionTarget {
    /// Every task of this orderingId.
    OrderingId(String),
    /// Every task of this type.
    TaskType(String),
    /// Every member of this group (its join type and id): a job's buckets.
    Group {
        /// The type that joins the group.
        task_type: String,
        /// The group's id.
        id: String,
    },
}

impl SuspensionTarget {
    /// The stored spelling of the kind.
    pub fn kind(&self) -> &'static str {
        match self {
            SuspensionTarget::OrderingId(_) => "orderingId",
            SuspensionTarget::TaskType(_) => "taskType",
            SuspensionTarget::Group { .. } => "group",
        }
    }

    /// The stored target: the orderingId, the type, or `<type>/<id>` for a group.
    pub fn target(&self) -> String {
        match self {
            SuspensionTarget::OrderingId(id) | SuspensionTarget::TaskType(id) => id.clone(),
            SuspensionTarget::Group { task_type, id } => format!("{task_type}/{id}"),
        }
    }

    /// The target of a stored kind and target; `None` for an unknown kind or a group without
    /// its type.
    pub fn parse(kind: &str, target: &str) -> Option<SuspensionTarget> {
        match kind {
            "orderingId" => Some(SuspensionTarget::OrderingId(target.to_string())),
            "taskType" => Some(SuspensionTarget::TaskType(target.to_string())),
            "group" => {
                let (task_type, id) = target.split_once('/')?;
                Some(SuspensionTarget::Group {
                    task_type: task_type.to_string(),
                    id: id.to_string(),
                })
            }
            _ => None,
        }
    }
}

impl SuspensionTarget {
    /// Every target that would hold `task` back: its orderingId, its type, and the group it is a
    /// member of (named by its join type).
    pub fn all_of(task: &Task) -> Vec<SuspensionTarget> {
        let mut targets = vec![
            SuspensionTarget::OrderingId(task.ordering_id.clone()),
            SuspensionTarget::TaskType(task.task_type.clone()),
        ];
        if let Some(member) = &task.group {
            targets.push(SuspensionTarget::Group {
                task_type: member
                    .join_type
                    .clone()
                    .unwrap_or_else(|| task.task_type.clone()),
                id: member.id.clone(),
            });
        }
        targets
    }
}

impl std::fmt::Display for SuspensionTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind(), self.target())
    }
}

/// A suspension, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suspension {
    /// What it holds back.
    pub target: SuspensionTarget,
    /// When it was recorded.
    pub since: DateTime<Utc>,
    /// Why, as the operator said.
    pub reason: Option<String>,
}

/// The suspensions in force, as a node last read them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Suspensions(std::collections::BTreeMap<SuspensionTarget, Suspension>);

impl Suspensions {
    /// The set of `suspensions`.
    pub fn new(suspensions: Vec<Suspension>) -> Suspensions {
        Suspensions(
            suspensions
                .into_iter()
                .map(|s| (s.target.clone(), s))
                .collect(),
        )
    }

    /// The suspension that holds `task` back, if one does: of its orderingId, its type, or the
    /// group it is a member of.
    pub fn of(&self, task: &Task) -> Option<&Suspension> {
        if self.0.is_empty() {
            return None;
        }
        self.holding(&SuspensionTarget::all_of(task))
    }

    /// The suspension of one of `targets`, if one holds it.
    pub fn holding(&self, targets: &[SuspensionTarget]) -> Option<&Suspension> {
        targets.iter().find_map(|target| self.0.get(target))
    }

    /// Every suspension, by target.
    pub fn all(&self) -> impl Iterator<Item = &Suspension> {
        self.0.values()
    }
}

/// The suspensions of a keyspace.
pub trait SuspensionStore: Send + Sync + 'static {
    /// Every suspension in force.
    fn suspensions(&self) -> BoxFuture<'static, StoreResult<Vec<Suspension>>>;

    /// Records a suspension (again: overwritten).
    fn suspend(&self, suspension: Suspension) -> BoxFuture<'static, StoreResult<()>>;

    /// Lifts the suspension of `target`, if any.
    fn resume(&self, target: SuspensionTarget) -> BoxFuture<'static, StoreResult<()>>;
}

/// `suspensions` on Cassandra: one small partition (`shard` 0) with a row per suspension, keyed
/// by its kind and target, so that a node reads every suspension with one single-partition
/// query. Written without a TTL: a suspension lasts until it is lifted.
#[cfg(feature = "node")]
mod cassandra {
    use std::sync::Arc;

    use chrono::{DateTime, Utc};
    use futures::future::BoxFuture;
    use futures::FutureExt;
    use scylla::statement::prepared::PreparedStatement;

    use super::{Suspension, SuspensionStore, SuspensionTarget};
    use crate::store::cassandra::rows::rows_of;
    use crate::store::cassandra::{CassandraStore, Preparing, TableStatements};
    use crate::store::{StoreError, StoreResult};

    /// The statements of `suspensions`: one partition (`shard` 0) holding every suspension.
    struct SuspensionStatements {
        select_all: PreparedStatement,
        insert: PreparedStatement,
        delete: PreparedStatement,
    }

    impl TableStatements for SuspensionStatements {
        async fn prepare(on: &Preparing<'_>) -> StoreResult<Self> {
            let ks = on.keyspace;
            let prepare = |cql: String| on.prepare("prepare suspension statement", cql);
            Ok(SuspensionStatements {
                select_all: prepare(format!(
                    "SELECT kind, target, since, reason FROM {ks}.suspensions WHERE shard = ?"
                ))
                .await?,
                insert: prepare(format!(
                    "INSERT INTO {ks}.suspensions (shard, kind, target, since, reason) \
                     VALUES (?, ?, ?, ?, ?)"
                ))
                .await?,
                delete: prepare(format!(
                    "DELETE FROM {ks}.suspensions WHERE shard = ? AND kind = ? AND target = ?"
                ))
                .await?,
            })
        }
    }

    /// The one partition every suspension is in.
    const SHARD: i32 = 0;

    /// A row: kind, target, since, reason (`since` is never null in rows this engine writes).
    type SuspensionRow = (String, String, Option<DateTime<Utc>>, Option<String>);

    fn corrupt(reason: String) -> StoreError {
        StoreError::Corrupt {
            what: "suspension",
            reason,
        }
    }

    /// The suspension a row holds; a kind or target that does not parse is corrupt.
    fn suspension_from_row(
        (kind, target, since, reason): SuspensionRow,
    ) -> StoreResult<Suspension> {
        let parsed = SuspensionTarget::parse(&kind, &target).ok_or_else(|| {
            corrupt(if kind == "group" {
                format!("group target {target:?} is not <type>/<id>")
            } else {
                format!("unknown kind {kind:?} (target {target:?})")
            })
        })?;
        let since = since.ok_or_else(|| corrupt(format!("{parsed} has no since")))?;
        Ok(Suspension {
            target: parsed,
            since,
            reason,
        })
    }

    impl SuspensionStore for CassandraStore {
        fn suspensions(&self) -> BoxFuture<'static, StoreResult<Vec<Suspension>>> {
            let inner = Arc::clone(&self.inner);
            async move {
                let result = inner
                    .run(
                        &inner.statements::<SuspensionStatements>().await?.select_all,
                        (SHARD,),
                        "suspensions read",
                    )
                    .await?;
                rows_of::<SuspensionRow>(result, "suspension")?
                    .into_iter()
                    .map(suspension_from_row)
                    .collect()
            }
            .boxed()
        }

        fn suspend(&self, suspension: Suspension) -> BoxFuture<'static, StoreResult<()>> {
            let inner = Arc::clone(&self.inner);
            async move {
                let target = &suspension.target;
                // A suspension recorded again replaces its reason, so an absent one is written null
                // (a cell tombstone, in a table of operator actions whose every lift leaves a row
                // tombstone anyway).
                let values = (
                    SHARD,
                    target.kind(),
                    target.target(),
                    suspension.since,
                    suspension.reason.as_deref(),
                );
                inner
                    .run(
                        &inner.statements::<SuspensionStatements>().await?.insert,
                        values,
                        "suspension write",
                    )
                    .await?;
                Ok(())
            }
            .boxed()
        }

        fn resume(&self, target: SuspensionTarget) -> BoxFuture<'static, StoreResult<()>> {
            let inner = Arc::clone(&self.inner);
            async move {
                let values = (SHARD, target.kind(), target.target());
                inner
                    .run(
                        &inner.statements::<SuspensionStatements>().await?.delete,
                        values,
                        "suspension delete",
                    )
                    .await?;
                Ok(())
            }
            .boxed()
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn row(kind: &str, target: &str) -> SuspensionRow {
            (kind.into(), target.into(), Some(Utc::now()), None)
        }

        #[test]
        fn rows_of_every_kind_read_back_and_bad_ones_are_corrupt() {
            let group = suspension_from_row(row("group", "recon/2026-05")).map(|s| s.target);
            assert_eq!(
                group.ok(),
                Some(SuspensionTarget::Group {
                    task_type: "recon".into(),
                    id: "2026-05".into()
                })
            );
            let ordering = suspension_from_row(row("orderingId", "customer-7")).map(|s| s.target);
            assert_eq!(
                ordering.ok(),
                Some(SuspensionTarget::OrderingId("customer-7".into()))
            );
            for (bad, says) in [
                (row("group", "recon"), "is not <type>/<id>"),
                (row("queue", "emails"), "unknown kind \"queue\""),
                (("taskType".into(), "t".into(), None, None), "has no since"),
            ] {
                match suspension_from_row(bad) {
                    Err(StoreError::Corrupt { what, reason }) => {
                        assert_eq!(what, "suspension");
                        assert!(reason.contains(says), "{reason}");
                    }
                    other => panic!("not corrupt: {other:?}"),
                }
            }
        }
    }
}

/// `suspensions` in memory, for unit tests, the simulation and the testing kit.
#[cfg(any(test, feature = "testing"))]
mod memory {
    use std::collections::BTreeMap;

    use futures::future::BoxFuture;

    use super::{Suspension, SuspensionStore, SuspensionTarget};
    use crate::store::memory::MemoryStore;
    use crate::store::StoreResult;

    /// The table's rows.
    type Rows = BTreeMap<SuspensionTarget, Suspension>;

    impl SuspensionStore for MemoryStore {
        fn suspensions(&self) -> BoxFuture<'static, StoreResult<Vec<Suspension>>> {
            self.run("suspensions read", |s| {
                s.table::<Rows>().values().cloned().collect()
            })
        }

        fn suspend(&self, suspension: Suspension) -> BoxFuture<'static, StoreResult<()>> {
            self.run("suspension write", move |s| {
                s.table::<Rows>()
                    .insert(suspension.target.clone(), suspension);
            })
        }

        fn resume(&self, target: SuspensionTarget) -> BoxFuture<'static, StoreResult<()>> {
            self.run("suspension write", move |s| {
                s.table::<Rows>().remove(&target);
            })
        }
    }
}
