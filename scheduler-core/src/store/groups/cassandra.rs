//! [`GroupStore`] on Cassandra: `group_members`, one partition per group (task type and id), a
//! row per finished member, and the group's header in static columns. `total` and `fail_fast`
//! are written with a member's row only by a member that carries them (a member without them
//! writes no null over them), and `failed_by` once, by a lightweight transaction.
//!
//! Over 500 lines: two tables' statements and implementation (`group_members`, `group_marks`),
//! with the decoding of their rows.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use futures::FutureExt;
use scheduler_client::TaskKey;

use crate::store::cassandra::rows::{first_row_of, rows_of};
use scylla::statement::prepared::PreparedStatement;

use crate::store::cassandra::{CassandraStore, Inner, Preparing, TableStatements};
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
            let statements = &*inner.statements::<GroupStatements>().await?;
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
                    &inner.statements::<GroupStatements>().await?.select_group,
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
                    &inner.statements::<GroupStatements>().await?.set_parent,
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
                    &inner.statements::<GroupStatements>().await?.select_header,
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
                    &inner
                        .statements::<GroupStatements>()
                        .await?
                        .select_members_in,
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
                .run(
                    &inner.statements::<GroupStatements>().await?.insert_mark,
                    values,
                    operation,
                )
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
                    &inner.statements::<GroupStatements>().await?.select_marks_in,
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
                    &inner.statements::<GroupStatements>().await?.select_marks,
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
    inner: &Inner,
    group: &GroupKey,
) -> StoreResult<(Option<String>, Option<String>)> {
    let read = inner
        .run(
            &inner.statements::<GroupStatements>().await?.select_parent,
            (group.task_type.as_str(), group.id.as_str()),
            "group parent read",
        )
        .await?;
    Ok(first_row_of::<(Option<String>, Option<String>)>(read, "group member")?.unwrap_or_default())
}

/// Rows read per page of a group: a group may have thousands of members, each with a result of
/// up to `MAX_RESULT_BYTES` (16 KiB): a page is at most 1.6 MiB.
const GROUP_PAGE: i32 = 100;

/// Marks read per page of a group's completion tree (a job's progress): small rows.
const MARKS_PAGE: i32 = 1000;

/// The statements of `group_members`.
struct GroupStatements {
    /// A member's row, by the header columns written with it (an absent value is left out,
    /// never written null): neither, `total`, `fail_fast`, both.
    insert_member: [PreparedStatement; 4],
    /// `failed_by`, unless a failure set it first.
    set_failed_by: PreparedStatement,
    /// The whole partition: the header and every member, paged (not the parent: a static
    /// column would come with every row).
    select_group: PreparedStatement,
    /// The header alone, one row.
    select_header: PreparedStatement,
    /// The members in a range of numbers, their status only.
    select_members_in: PreparedStatement,
    /// A node of the completion tree as finished.
    insert_mark: PreparedStatement,
    /// The finished nodes in a range of one level.
    select_marks_in: PreparedStatement,
    /// Every finished node, paged.
    select_marks: PreparedStatement,

    /// The task whose sub-tasks the group holds, and its result.
    set_parent: PreparedStatement,
    /// Those two: the header alone, one row.
    select_parent: PreparedStatement,
}

impl TableStatements for GroupStatements {
    async fn prepare(on: &Preparing<'_>) -> StoreResult<Self> {
        let ks = on.keyspace;
        let prepare = |cql: String| on.prepare("prepare group statement", cql);
        let insert = |total: bool, fail_fast: bool| {
            let mut columns = "task_type, group_id, member, ordering_id, scheduled_time, \
                               uniqueness_key, status, error, result, finished_at"
                .to_string();
            let mut values = "?, ?, ?, ?, ?, ?, ?, ?, ?, ?".to_string();
            if total {
                columns.push_str(", total");
                values.push_str(", ?");
            }
            if fail_fast {
                columns.push_str(", fail_fast");
                values.push_str(", true");
            }
            prepare(format!(
                "INSERT INTO {ks}.group_members ({columns}) VALUES ({values})"
            ))
        };
        let mut select_group = prepare(format!(
            "SELECT total, fail_fast, failed_by, member, ordering_id, scheduled_time, \
             uniqueness_key, status, error, result, finished_at FROM {ks}.group_members \
             WHERE task_type = ? AND group_id = ?"
        ))
        .await?;
        select_group.set_page_size(GROUP_PAGE);
        let mut select_marks = prepare(format!(
            "SELECT level, node, completed, failed, cancelled, items FROM {ks}.group_marks \
             WHERE task_type = ? AND group_id = ?"
        ))
        .await?;
        select_marks.set_page_size(MARKS_PAGE);
        Ok(GroupStatements {
            insert_member: [
                insert(false, false).await?,
                insert(true, false).await?,
                insert(false, true).await?,
                insert(true, true).await?,
            ],
            // A lightweight transaction on a static column (Cassandra 2.1 has them): of
            // concurrent failures, one is recorded and stays.
            set_failed_by: prepare(format!(
                "UPDATE {ks}.group_members SET failed_by = ? WHERE task_type = ? \
                 AND group_id = ? IF failed_by = null"
            ))
            .await?,
            select_group,
            // At the session's consistency, like the ownership check: a failure whose
            // transaction completed was committed at that level, so a read that begins after it
            // sees it; one still in progress may be missed, as if the member had started just
            // before it. One round trip instead of a Paxos round before every member runs.
            select_header: prepare(format!(
                "SELECT total, fail_fast, failed_by FROM {ks}.group_members \
                 WHERE task_type = ? AND group_id = ? LIMIT 1"
            ))
            .await?,
            // A slice of the clustering order: at most `last - first + 1` rows.
            select_members_in: prepare(format!(
                "SELECT member, status FROM {ks}.group_members WHERE task_type = ? \
                 AND group_id = ? AND member >= ? AND member <= ?"
            ))
            .await?,
            insert_mark: prepare(format!(
                "INSERT INTO {ks}.group_marks (task_type, group_id, level, node, completed, \
                 failed, cancelled, items) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            ))
            .await?,
            select_marks_in: prepare(format!(
                "SELECT level, node, completed, failed, cancelled, items FROM {ks}.group_marks \
                 WHERE task_type = ? AND group_id = ? AND level = ? AND node >= ? AND node <= ?"
            ))
            .await?,
            select_marks,
            // Only the header: a static column set by partition key alone.
            set_parent: prepare(format!(
                "UPDATE {ks}.group_members SET parent = ?, parent_result = ? WHERE task_type = ? \
                 AND group_id = ?"
            ))
            .await?,
            select_parent: prepare(format!(
                "SELECT parent, parent_result FROM {ks}.group_members WHERE task_type = ? \
                 AND group_id = ? LIMIT 1"
            ))
            .await?,
        })
    }
}
