//! The status check before every attempt: the task's final status, and beside it what the
//! hooks read ([`TaskHook::check`]).

use std::sync::Arc;

use futures::future::BoxFuture;
use scheduler_client::{Task, TaskKey};
use tokio::sync::watch;

use super::super::RunTables;
use crate::hooks::{Check, TaskHook};
use crate::outcome::StopReason;
use crate::store::{PartitionId, StatusRecord, StatusStore, StoreError, StoreResult};

/// Why a task is not run: its final status was found, or a hook said so.
pub(super) enum Found {
    Final(StatusRecord),
    NotRun { why: &'static str },
}

/// What the status check found: why the task is not run, else the copy of it to run (`None`:
/// as loaded).
pub(super) type Checked = (Option<Found>, Option<Box<Task>>);

/// The status check of `task`, and, if an earlier tree may have attempted it (`earlier`), its
/// last attempt number, read concurrently; `None` if the tree stops first.
pub(super) async fn read_status(
    tables: RunTables,
    hooks: &[Arc<dyn TaskHook>],
    partition: PartitionId,
    task: &Task,
    earlier: bool,
    mut stop: watch::Receiver<Option<StopReason>>,
) -> Option<StoreResult<(Checked, Option<u32>)>> {
    let key = task.key();
    let found = finished_or_not_run(tables.status.as_ref(), hooks, partition, task);
    let last = async {
        if !earlier {
            return Ok(None);
        }
        let attempts = tables.attempts.attempts(key.clone(), 1).await?;
        Ok(attempts.first().map(|a| a.attempt))
    };
    let read = async {
        let (found, last) = futures::future::join(found, last).await;
        Ok((found?, last?))
    };
    tokio::select! {
        biased;
        _ = stop.wait_for(Option::is_some) => None,
        read = read => Some(read),
    }
}

/// The task's final status, or a hook's reason not to run it, else the copy of it to run:
/// the status and the hooks' reads are made at once.
pub(super) async fn finished_or_not_run(
    store: &dyn StatusStore,
    hooks: &[Arc<dyn TaskHook>],
    partition: PartitionId,
    task: &Task,
) -> StoreResult<Checked> {
    let key: TaskKey = task.key();
    let checks: Vec<BoxFuture<'static, Result<Check, StoreError>>> = hooks
        .iter()
        .filter_map(|hook| hook.check(partition, task))
        .collect();
    let status = store.status(partition, key);
    let (status, checks) = futures::future::join(status, futures::future::join_all(checks)).await;
    if let Some(status) = status? {
        return Ok((Some(Found::Final(status)), None));
    }
    let mut current = None;
    for check in checks {
        match check? {
            Check::NotRun { why } => return Ok((Some(Found::NotRun { why }), None)),
            Check::Run(copy) => current = copy.or(current),
        }
    }
    Ok((None, current))
}
