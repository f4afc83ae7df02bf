//! [`GroupStore`] on Cassandra: `group_members`, one partition per group (task type and id), a
//! row per finished member, and the group's header in static columns. `total` and `fail_fast`
//! are written with a member's row only by a member that carries them (a member without them
//! writes no null over them), and `failed_by` once, by a lightweight transaction.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use futures::FutureExt;
use scheduler_client::TaskKey;

use super::rows::first_row_of;
use super::CassandraStore;
use crate::store::groups::stored_group_number;
use crate::store::{
    GroupKey, GroupState, GroupStore, MemberOutcome, ParentRecord, StoreError, StoreResult,
    TaskStatus,
};

/// A `group_members` row: the statics (`total`, `fail_fast`, `failed_by`), then the member's
/// columns, all null in a partition that holds only its header, then the static `parent`.
type MemberRow = (
    Option<i32>,
    Option<bool>,
    Option<i32>,
    Option<i32>,
    Option<String>,
    Option<DateTime<Utc>>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<DateTime<Utc>>,
    Option<String>,
);

fn corrupt(reason: String) -> StoreError {
    StoreError::Corrupt {
        what: "group member",
        reason,
    }
}

/// A stored member number or total.
fn read_number(n: i32, column: &str) -> StoreResult<u32> {
    u32::try_from(n).map_err(|_| corrupt(format!("negative {column} {n}")))
}

/// The member outcome of a row that has a member, `None` for the header-only row.
fn member_from_row(row: &mut MemberRow) -> StoreResult<Option<MemberOutcome>> {
    let Some(member) = row.3 else {
        return Ok(None);
    };
    let missing = |column: &str| corrupt(format!("member {member} has no {column}"));
    let ordering_id = row.4.take().ok_or_else(|| missing("ordering_id"))?;
    let scheduled_time = row.5.ok_or_else(|| missing("scheduled_time"))?;
    let uniqueness_key = row.6.take().ok_or_else(|| missing("uniqueness_key"))?;
    let status = row.7.take().ok_or_else(|| missing("status"))?;
    let finished_at = row.10.ok_or_else(|| missing("finished_at"))?;
    let status = TaskStatus::parse(&status)
        .ok_or_else(|| corrupt(format!("member {member}: unknown status {status:?}")))?;
    let result = row
        .9
        .take()
        .map(|text| serde_json::from_str(&text))
        .transpose()
        .map_err(|e| corrupt(format!("member {member}: result: {e}")))?;
    Ok(Some(MemberOutcome {
        index: read_number(member, "member")?,
        key: TaskKey {
            scheduled_time,
            ordering_id,
            uniqueness_key,
        },
        status,
        error: row.8.take(),
        result,
        finished_at,
    }))
}

impl GroupStore for CassandraStore {
    fn record_member(
        &self,
        group: GroupKey,
        outcome: MemberOutcome,
        total: Option<u32>,
        fail_fast: bool,
    ) -> BoxFuture<'static, StoreResult<()>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let operation = "group member write";
            let member = stored_group_number(outcome.index, operation)?;
            let total = total
                .map(|t| stored_group_number(t, operation))
                .transpose()?;
            let failed = fail_fast && outcome.is_failure();
            let result = outcome.result.as_ref().map(|value| value.to_string());
            let key = outcome.key;
            let row = (
                group.task_type.as_str(),
                group.id.as_str(),
                member,
                key.ordering_id,
                key.scheduled_time,
                key.uniqueness_key,
                outcome.status.as_str(),
                outcome.error,
                result,
                outcome.finished_at,
            );
            let statements = &inner.statements.groups;
            let insert = &statements.insert_member
                [usize::from(total.is_some()) + 2 * usize::from(fail_fast)];
            match total {
                None => inner.run(insert, row, operation).await?,
                Some(total) => {
                    let (t, g, m, o, s, u, st, e, r, f) = row;
                    let values = (t, g, m, o, s, u, st, e, r, f, total);
                    inner.run(insert, values, operation).await?
                }
            };
            // After the member's row, so that whoever sees `failed_by` also sees its member.
            // Whether it applied does not matter: another failure may have been first.
            if failed {
                let values = (member, group.task_type.as_str(), group.id.as_str());
                inner
                    .run(&statements.set_failed_by, values, "group failure write")
                    .await?;
            }
            Ok(())
        }
        .boxed()
    }

    fn group(&self, group: GroupKey) -> BoxFuture<'static, StoreResult<Option<GroupState>>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let rows: Vec<MemberRow> = inner
                .run_paged(
                    &inner.statements.groups.select_group,
                    (group.task_type.as_str(), group.id.as_str()),
                    "group read",
                    "group member",
                )
                .await?;
            if rows.is_empty() {
                return Ok(None);
            }
            let mut state = GroupState::default();
            for mut row in rows {
                // Every row repeats the header; a page read after a member set it may see more.
                if let Some(total) = row.0 {
                    state.total = Some(read_number(total, "total")?);
                }
                state.fail_fast |= row.1.unwrap_or(false);
                if let (None, Some(failed_by)) = (state.failed_by, row.2) {
                    state.failed_by = Some(read_number(failed_by, "failed_by")?);
                }
                if let (None, Some(text)) = (&state.parent, row.11.take()) {
                    let parent = scheduler_client::wire::decode(Some(text.as_bytes()), usize::MAX)
                        .map_err(|e| corrupt(format!("parent: {e}")))?;
                    state.parent = Some(parent);
                }
                state.members.extend(member_from_row(&mut row)?);
            }
            // The members came in clustering order: by number.
            Ok(Some(state))
        }
        .boxed()
    }

    fn record_parent(
        &self,
        group: GroupKey,
        parent: ParentRecord,
    ) -> BoxFuture<'static, StoreResult<()>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let text =
                String::from_utf8_lossy(&scheduler_client::wire::encode(&parent.task)).into_owned();
            // (None writes null: a run again that set no result leaves none of an earlier one.
            // One cell per group.)
            let result = parent.result.as_ref().map(|value| value.to_string());
            let values = (text, result, group.task_type.as_str(), group.id.as_str());
            inner
                .run(
                    &inner.statements.groups.set_parent,
                    values,
                    "group parent write",
                )
                .await?;
            Ok(())
        }
        .boxed()
    }

    fn group_parent(
        &self,
        group: GroupKey,
    ) -> BoxFuture<'static, StoreResult<Option<ParentRecord>>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let read = inner
                .run(
                    &inner.statements.groups.select_parent,
                    (group.task_type.as_str(), group.id.as_str()),
                    "group parent read",
                )
                .await?;
            let row = first_row_of::<(Option<String>, Option<String>)>(read, "group member")?;
            let Some((Some(task), result)) = row else {
                return Ok(None);
            };
            let task = scheduler_client::wire::decode(Some(task.as_bytes()), usize::MAX)
                .map_err(|e| corrupt(format!("parent: {e}")))?;
            let result = result
                .map(|text| serde_json::from_str(&text))
                .transpose()
                .map_err(|e| corrupt(format!("parent result: {e}")))?;
            Ok(Some(ParentRecord { task, result }))
        }
        .boxed()
    }

    fn group_failed_by(&self, group: GroupKey) -> BoxFuture<'static, StoreResult<Option<u32>>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let result = inner
                .run(
                    &inner.statements.groups.select_failed_by,
                    (group.task_type.as_str(), group.id.as_str()),
                    "group read",
                )
                .await?;
            first_row_of::<(Option<i32>,)>(result, "group member")?
                .and_then(|(failed_by,)| failed_by)
                .map(|n| read_number(n, "failed_by"))
                .transpose()
        }
        .boxed()
    }
}
