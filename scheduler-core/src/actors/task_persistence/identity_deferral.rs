//! Deferring the identity records an earlier tree's call could defeat, and applying them after.
//!
//! A record acting on an identity (a task with a conflict mode, a reschedule, a cancel by
//! identity) can leave the identity's current task superseded: replaced by a newer one, moved,
//! cancelled. The tree that owns the partition resolves it, and its own lifecycle checks the
//! identity's record before a call; but an earlier tree of the partition may hold a call it was
//! cleared to make before this tree's claim (see [`crate::lease`] and `cancels`), and its checks
//! are done. Were the record applied at once, the earlier tree could call the superseded task
//! after the newer one's record was written: both would run, the old one after it was replaced.
//!
//! So, as a cancel is, an identity record of an orderingId that an earlier tree still lists in
//! its lease is **deferred**: written to `deferred_identity_records` (as it was polled) before
//! the batch is acknowledged, and applied once no earlier tree lists the orderingId, by this
//! tree or, if it stops first, by the next one as it starts. Every later record of that
//! orderingId waits behind it, so the records of an identity still apply in partition order;
//! applying one is resolving it as if it had just been polled. The earlier tree's call, if it
//! ran, ran before the record was applied, like a call a replace finds running.

use std::collections::{BTreeMap, BTreeSet};

use futures::{StreamExt, TryStreamExt};
use scheduler_client::wire;
use tracing::{info, warn};

use super::tables::PersistenceTables;
use crate::actors::{IdentityOp, PolledTasks};
use crate::cancel_gate::{Applying, CancelGate};
use crate::lease::TreeLease;
use crate::store::{
    DeferredIdentityRecord, PartitionId, StoreError, StoreResult, WRITE_CONCURRENCY,
};

/// What deferring identity records needs.
#[derive(Clone)]
pub(super) struct IdentityDeferrer {
    pub(super) partition: PartitionId,
    pub(super) tables: PersistenceTables,
    pub(super) lease: TreeLease,
    pub(super) gate: CancelGate,
}

/// Identity records deferred, in partition order, with holds on their identities' current
/// tasks: until the records are applied, this tree does not call those (an earlier tree's call
/// ended without an outcome would otherwise be made again, ahead of a replace polled before).
#[derive(Default)]
pub(super) struct Deferral {
    ops: Vec<IdentityOp>,
    holds: Vec<(String, Applying)>,
}

impl IdentityDeferrer {
    /// Splits `ops` (in partition order) into those to resolve now and those to defer: of an
    /// orderingId that an earlier tree still lists in its lease, or that has records waiting
    /// already (`waiting`). Records the latter in `deferred_identity_records`. Call it once the
    /// tree's claim completed.
    pub(super) async fn defer_where_needed(
        &self,
        ops: Vec<IdentityOp>,
        waiting: &BTreeSet<String>,
    ) -> StoreResult<(Vec<IdentityOp>, Deferral)> {
        let (mut now, mut deferred) = (Vec::new(), Vec::new());
        let mut decided: BTreeMap<String, bool> = BTreeMap::new();
        for op in ops {
            let ordering_id = op.identity().ordering_id;
            let defer = match decided.get(&ordering_id) {
                Some(defer) => *defer,
                None => {
                    let defer = waiting.contains(&ordering_id)
                        || self.lease.runs_in_earlier_tree(&ordering_id).await?;
                    decided.insert(ordering_id, defer);
                    defer
                }
            };
            if defer {
                deferred.push(op);
            } else {
                now.push(op);
            }
        }
        if deferred.is_empty() {
            return Ok((now, Deferral::default()));
        }
        let deferral = self.held(deferred).await?;
        let partition = self.partition;
        futures::stream::iter(deferral.ops.iter().map(stored))
            .map(|record| {
                self.tables
                    .schedule
                    .defer_identity_record(partition, record)
            })
            .buffer_unordered(WRITE_CONCURRENCY)
            .try_collect::<()>()
            .await?;
        for op in &deferral.ops {
            info!(partition, identity = %op.identity(), offset = op.offset(),
                "identity record deferred: an earlier tree of the partition may still call a task of its orderingId");
        }
        Ok((now, deferral))
    }

    /// The records an earlier tree deferred (`deferred_identity_records`), in partition order
    /// by orderingId, held as [`Self::defer_where_needed`] holds them. A record this release
    /// cannot read is left in the table, where it does no harm.
    pub(super) async fn restore(
        &self,
        stored: Vec<DeferredIdentityRecord>,
    ) -> StoreResult<Deferral> {
        let mut ops = Vec::new();
        for record in &stored {
            match restored(self.partition, record) {
                Ok(op) => ops.push(op),
                Err(e) => {
                    warn!(partition = self.partition, ordering_id = record.ordering_id,
                        offset = record.offset, error = %e, "a deferred identity record cannot be read; left unapplied");
                }
            }
        }
        ops.sort_by_key(|op| (op.identity().ordering_id, op.offset()));
        self.held(ops).await
    }

    /// `ops` with holds on the current tasks of their identities.
    async fn held(&self, ops: Vec<IdentityOp>) -> StoreResult<Deferral> {
        let identities: BTreeSet<_> = ops.iter().map(IdentityOp::identity).collect();
        let mut holds = Vec::new();
        for identity in identities {
            let ordering_id = identity.ordering_id.clone();
            if let Some(record) = self
                .tables
                .identities
                .identity(self.partition, identity)
                .await?
            {
                let key = record.task.key();
                holds.push((ordering_id, self.gate.applying(std::slice::from_ref(&key))));
            }
        }
        Ok(Deferral { ops, holds })
    }
}

/// The records waiting for earlier trees' calls, by orderingId, each list in partition order,
/// with their holds.
#[derive(Default)]
pub(super) struct WaitingRecords {
    by_ordering_id: BTreeMap<String, Waiting>,
}

#[derive(Default)]
struct Waiting {
    ops: Vec<IdentityOp>,
    holds: Vec<Applying>,
}

impl WaitingRecords {
    /// The orderingIds with records waiting.
    pub(super) fn ordering_ids(&self) -> BTreeSet<String> {
        self.by_ordering_id.keys().cloned().collect()
    }

    /// Adds `deferral`'s records behind those waiting; returns the orderingIds that had none
    /// waiting (each needs a wait for earlier trees started).
    pub(super) fn add(&mut self, deferral: Deferral) -> Vec<String> {
        let mut new = Vec::new();
        for op in deferral.ops {
            let ordering_id = op.identity().ordering_id;
            let waiting = self.by_ordering_id.entry(ordering_id.clone()).or_default();
            if waiting.ops.is_empty() {
                new.push(ordering_id);
            }
            waiting.ops.push(op);
        }
        for (ordering_id, hold) in deferral.holds {
            if let Some(waiting) = self.by_ordering_id.get_mut(&ordering_id) {
                waiting.holds.push(hold);
            }
        }
        new
    }

    /// The records of `ordering_id` and their holds, to apply (put them back with
    /// [`Self::put_back`] if that fails; drop the holds once they are applied).
    pub(super) fn take(&mut self, ordering_id: &str) -> (Vec<IdentityOp>, Vec<Applying>) {
        let waiting = self.by_ordering_id.remove(ordering_id).unwrap_or_default();
        (waiting.ops, waiting.holds)
    }

    /// Puts records that could not be applied back ahead of any added since.
    pub(super) fn put_back(
        &mut self,
        ordering_id: String,
        mut ops: Vec<IdentityOp>,
        holds: Vec<Applying>,
    ) {
        if ops.is_empty() {
            return;
        }
        let waiting = self.by_ordering_id.entry(ordering_id).or_default();
        ops.append(&mut waiting.ops);
        waiting.ops = ops;
        waiting.holds.extend(holds);
    }
}

/// A record as `deferred_identity_records` keeps it: its wire encoding.
fn stored(op: &IdentityOp) -> DeferredIdentityRecord {
    let identity = op.identity();
    let (value, trace_parent) = match op {
        IdentityOp::Schedule(task) => (wire::encode(task), task.trace_parent.clone()),
        IdentityOp::Reschedule { identity, to, .. } => {
            (wire::encode_reschedule(identity, *to), None)
        }
        IdentityOp::Cancel { identity, .. } => (wire::encode_cancel_identity(identity), None),
    };
    DeferredIdentityRecord {
        ordering_id: identity.ordering_id,
        offset: op.offset(),
        // The wire format is JSON: UTF-8.
        record: String::from_utf8_lossy(&value).into_owned(),
        trace_parent,
    }
}

/// The record `stored` kept, as it was polled at its offset.
fn restored(partition: PartitionId, stored: &DeferredIdentityRecord) -> StoreResult<IdentityOp> {
    let corrupt = |reason: String| StoreError::Corrupt {
        what: "deferred identity record",
        reason,
    };
    let record = wire::decode_record(Some(stored.record.as_bytes()), usize::MAX)
        .map_err(|e| corrupt(e.to_string()))?;
    let mut polled = PolledTasks::default();
    polled.add(partition, stored.offset, record);
    let mut op = polled
        .by_identity
        .pop()
        .ok_or_else(|| corrupt("not a record acting on an identity".into()))?;
    if let IdentityOp::Schedule(task) = &mut op {
        task.trace_parent.clone_from(&stored.trace_parent);
    }
    Ok(op)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};
    use scheduler_client::{OnConflict, Task, TaskIdentity};

    #[test]
    fn a_deferred_record_is_restored_as_it_was_polled() {
        let at = Utc
            .timestamp_millis_opt(1_900_000_000_123)
            .single()
            .expect("time");
        let data = serde_json::json!({ "n": 1.5, "s": "é" });
        let mut task = Task::new("o", at, "u", data.as_object().cloned().unwrap_or_default())
            .on_conflict(OnConflict::Debounce {
                max_wait: std::time::Duration::from_secs(30),
            })
            .enqueued_at(41);
        task.trace_parent = Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into());
        let identity = TaskIdentity::new("o", "u");
        for op in [
            IdentityOp::Schedule(task),
            IdentityOp::Reschedule {
                identity: identity.clone(),
                to: at,
                offset: 42,
            },
            IdentityOp::Cancel {
                identity,
                offset: 43,
            },
        ] {
            let kept = stored(&op);
            assert_eq!(kept.ordering_id, "o");
            assert_eq!(restored(3, &kept).expect("restored"), op);
        }
    }

    #[test]
    fn a_record_put_back_goes_ahead_of_those_added_since() {
        let op = |offset| IdentityOp::Cancel {
            identity: TaskIdentity::new("o", "u"),
            offset,
        };
        let deferral = |ops| Deferral {
            ops,
            holds: Vec::new(),
        };
        let mut waiting = WaitingRecords::default();
        assert_eq!(waiting.add(deferral(vec![op(1), op(2)])), ["o"]);
        let (taken, holds) = waiting.take("o");
        assert_eq!(waiting.add(deferral(vec![op(3)])), ["o"]);
        waiting.put_back("o".into(), taken, holds);
        assert_eq!(waiting.take("o").0, [op(1), op(2), op(3)]);
        assert!(waiting.ordering_ids().is_empty());
    }
}
