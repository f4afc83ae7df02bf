//! [`GroupStore`] on Cassandra: `group_members`, one partition per group (task type and id), a
//! row per finished member, and the group's header in static columns. `total` and `fail_fast`
//! are written with a member's row only by a member that carries them (a member without them
//! writes no null over them), and `failed_by` once, by a lightweight transaction.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use futures::FutureExt;
use scheduler_client::TaskKey;

use super::rows::{first_row_of, rows_of};
use super::CassandraStore;
use crate::store::groups::stored_group_number;
use crate::store::{
    GroupHeader, GroupKey, GroupMark, GroupState, GroupStore, GroupTally, MemberOutcome,
    ParentRecord, StoreError, StoreResult, TaskStatus,
};

/// A `group_members` row: the statics (`total`, `fail_fast`, `failed_by`), then the member's
/// columns, all null in a partition that holds only its header.
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
);

/// A `group_marks` row: level, node, completed, failed, cancelled, items.
type MarkRow = (i32, i32, i32, i32, i32, Option<i64>);

fn mark_from_row(
    (level, node, completed, failed, cancelled, items): MarkRow,
) -> StoreResult<GroupMark> {
    let count = |n: i32, column: &str| {
        u32::try_from(n).map_err(|_| StoreError::Corrupt {
            what: "group mark",
            reason: format!("negative {column} {n}"),
        })
    };
    Ok(GroupMark {
        level: u8::try_from(level).map_err(|_| StoreError::Corrupt {
            what: "group mark",
            reason: format!("level {level}"),
        })?,
        node: count(node, "node")?,
        tally: GroupTally {
            completed: count(completed, "completed")?,
            failed: count(failed, "failed")?,
            cancelled: count(cancelled, "cancelled")?,
            items: u64::try_from(items.unwrap_or(0)).map_err(|_| StoreError::Corrupt {
                what: "group mark",
                reason: format!("negative items {items:?}"),
            })?,
        },
    })
}

/// The header of a row's static columns.
fn header_from(
    total: Option<i32>,
    fail_fast: Option<bool>,
    failed_by: Option<i32>,
) -> StoreResult<GroupHeader> {
    Ok(GroupHeader {
        total: total.map(|t| read_number(t, "total")).transpose()?,
        fail_fast: fail_fast.unwrap_or(false),
        failed_by: failed_by.map(|n| read_number(n, "failed_by")).transpose()?,
    })
}

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
                state.members.extend(member_from_row(&mut row)?);
            }
            // The members came in clustering order: by number. The parent, once.
            if let Some(text) = parent_of(&inner, &group).await?.0 {
                let parent = scheduler_client::wire::decode(Some(text.as_bytes()), usize::MAX)
                    .map_err(|e| corrupt(format!("parent: {e}")))?;
                state.parent = Some(parent);
            }
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
            let (Some(task), result) = parent_of(&inner, &group).await? else {
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

    fn group_header(&self, group: GroupKey) -> BoxFuture<'static, StoreResult<GroupHeader>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let result = inner
                .run(
                    &inner.statements.groups.select_header,
                    (group.task_type.as_str(), group.id.as_str()),
                    "group read",
                )
                .await?;
            type Header = (Option<i32>, Option<bool>, Option<i32>);
            match first_row_of::<Header>(result, "group member")? {
                Some((total, fail_fast, failed_by)) => header_from(total, fail_fast, failed_by),
                None => Ok(GroupHeader::default()),
            }
        }
        .boxed()
    }

    fn finished_members(
        &self,
        group: GroupKey,
        first: u32,
        last: u32,
    ) -> BoxFuture<'static, StoreResult<Vec<(u32, TaskStatus)>>> {
        let inner = Arc::clone(&self.inner);
        async move {
            // Numbers past the column's range hold no member.
            let first = i32::try_from(first).unwrap_or(i32::MAX);
            let last = i32::try_from(last).unwrap_or(i32::MAX);
            let values = (group.task_type.as_str(), group.id.as_str(), first, last);
            let result = inner
                .run(
                    &inner.statements.groups.select_members_in,
                    values,
                    "group read",
                )
                .await?;
            let rows = rows_of::<(i32, Option<String>)>(result, "group member")?;
            let mut members = Vec::with_capacity(rows.len());
            for (member, status) in rows {
                let status = status.unwrap_or_default();
                let status = TaskStatus::parse(&status).ok_or_else(|| {
                    corrupt(format!("member {member}: unknown status {status:?}"))
                })?;
                members.push((read_number(member, "member")?, status));
            }
            Ok(members)
        }
        .boxed()
    }

    fn record_group_mark(
        &self,
        group: GroupKey,
        mark: GroupMark,
    ) -> BoxFuture<'static, StoreResult<()>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let operation = "group mark write";
            let number = |n: u32| stored_group_number(n, operation);
            let tally = mark.tally;
            let values = (
                group.task_type.as_str(),
                group.id.as_str(),
                i32::from(mark.level),
                number(mark.node)?,
                number(tally.completed)?,
                number(tally.failed)?,
                number(tally.cancelled)?,
                i64::try_from(tally.items).unwrap_or(i64::MAX),
            );
            inner
                .run(&inner.statements.groups.insert_mark, values, operation)
                .await?;
            Ok(())
        }
        .boxed()
    }

    fn group_marks(
        &self,
        group: GroupKey,
        level: u8,
        first: u32,
        last: u32,
    ) -> BoxFuture<'static, StoreResult<Vec<GroupMark>>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let first = i32::try_from(first).unwrap_or(i32::MAX);
            let last = i32::try_from(last).unwrap_or(i32::MAX);
            let values = (
                group.task_type.as_str(),
                group.id.as_str(),
                i32::from(level),
                first,
                last,
            );
            let result = inner
                .run(
                    &inner.statements.groups.select_marks_in,
                    values,
                    "group read",
                )
                .await?;
            (rows_of::<MarkRow>(result, "group mark")?.into_iter())
                .map(mark_from_row)
                .collect()
        }
        .boxed()
    }

    fn all_group_marks(&self, group: GroupKey) -> BoxFuture<'static, StoreResult<Vec<GroupMark>>> {
        let inner = Arc::clone(&self.inner);
        async move {
            let rows: Vec<MarkRow> = inner
                .run_paged(
                    &inner.statements.groups.select_marks,
                    (group.task_type.as_str(), group.id.as_str()),
                    "group read",
                    "group mark",
                )
                .await?;
            rows.into_iter().map(mark_from_row).collect()
        }
        .boxed()
    }
}

/// The group's `parent` and `parent_result` (the header alone, one row).
async fn parent_of(
    inner: &super::Inner,
    group: &GroupKey,
) -> StoreResult<(Option<String>, Option<String>)> {
    let read = inner
        .run(
            &inner.statements.groups.select_parent,
            (group.task_type.as_str(), group.id.as_str()),
            "group parent read",
        )
        .await?;
    Ok(first_row_of::<(Option<String>, Option<String>)>(read, "group member")?.unwrap_or_default())
}
