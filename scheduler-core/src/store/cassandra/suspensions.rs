//! [`SuspensionStore`] on Cassandra: `suspensions`, one small partition (`shard` 0) with a row
//! per suspension, keyed by its kind and target, so that a node reads every suspension with one
//! single-partition query. Written without a TTL: a suspension lasts until it is lifted.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use futures::FutureExt;

use super::rows::rows_of;
use super::CassandraStore;
use crate::store::{StoreError, StoreResult, Suspension, SuspensionStore, SuspensionTarget};

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
fn suspension_from_row((kind, target, since, reason): SuspensionRow) -> StoreResult<Suspension> {
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
                    &inner.statements.suspensions.select_all,
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
                    &inner.statements.suspensions.insert,
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
                    &inner.statements.suspensions.delete,
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
