//! `group_members`, `group_marks` and the groups' parents in memory, for unit tests, the
//! simulation and the testing kit.

use futures::FutureExt;

use super::*;
use crate::store::memory::MemoryStore;

/// The tables' rows: each group's members (and header, and parent), its parent's result, and
/// its completion tree's finished nodes by level and node.
#[derive(Default)]
struct Rows {
    groups: std::collections::BTreeMap<GroupKey, GroupState>,
    parent_results: std::collections::BTreeMap<GroupKey, serde_json::Value>,
    marks: std::collections::BTreeMap<(GroupKey, u8, u32), GroupTally>,
}

// Read by the unit tests and the simulation.
#[cfg_attr(not(test), allow(dead_code))]
impl MemoryStore {
    /// Every group the store holds.
    pub fn groups(&self) -> std::collections::BTreeMap<GroupKey, GroupState> {
        self.lock().table::<Rows>().groups.clone()
    }
}

impl GroupStore for MemoryStore {
    fn record_member(
        &self,
        group: GroupKey,
        outcome: MemberOutcome,
        total: Option<u32>,
        fail_fast: bool,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.run("group write", move |s| {
            // Cassandra's `int` columns `member` and `total`.
            let operation = "group member write";
            stored_group_number(outcome.index, operation)?;
            total
                .map(|t| stored_group_number(t, operation))
                .transpose()?;
            let state = s.table::<Rows>().groups.entry(group).or_default();
            state.total = total.or(state.total);
            state.fail_fast |= fail_fast;
            if fail_fast && outcome.is_failure() && state.failed_by.is_none() {
                state.failed_by = Some(outcome.index);
            }
            state.members.retain(|m| m.index != outcome.index);
            state.members.push(outcome);
            state.members.sort_by_key(|m| m.index);
            Ok(())
        })
        .map(Result::flatten)
        .boxed()
    }

    fn group(&self, group: GroupKey) -> BoxFuture<'static, StoreResult<Option<GroupState>>> {
        self.run("group read", move |s| {
            let state = s.table::<Rows>().groups.get(&group).cloned();
            // The header, then a row per member.
            s.group_rows_read += 1 + state.as_ref().map_or(0, |g| g.members.len());
            state
        })
    }

    fn record_parent(
        &self,
        group: GroupKey,
        parent: ParentRecord,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.run("group write", move |s| {
            match parent.result {
                Some(result) => s
                    .table::<Rows>()
                    .parent_results
                    .insert(group.clone(), result),
                None => s.table::<Rows>().parent_results.remove(&group),
            };
            s.table::<Rows>().groups.entry(group).or_default().parent = Some(parent.task);
        })
    }

    fn group_parent(
        &self,
        group: GroupKey,
    ) -> BoxFuture<'static, StoreResult<Option<ParentRecord>>> {
        self.run("group read", move |s| {
            let task = s.table::<Rows>().groups.get(&group)?.parent.clone()?;
            let result = s.table::<Rows>().parent_results.get(&group).cloned();
            Some(ParentRecord { task, result })
        })
    }

    fn group_header(&self, group: GroupKey) -> BoxFuture<'static, StoreResult<GroupHeader>> {
        self.run("group read", move |s| {
            s.group_rows_read += 1;
            s.table::<Rows>()
                .groups
                .get(&group)
                .map(|state| GroupHeader {
                    total: state.total,
                    fail_fast: state.fail_fast,
                    failed_by: state.failed_by,
                })
                .unwrap_or_default()
        })
    }

    fn finished_members(
        &self,
        group: GroupKey,
        first: u32,
        last: u32,
    ) -> BoxFuture<'static, StoreResult<Vec<(u32, TaskStatus)>>> {
        self.run("group read", move |s| {
            let members: Vec<(u32, TaskStatus)> =
                (s.table::<Rows>().groups.get(&group).into_iter())
                    .flat_map(|state| &state.members)
                    .filter(|m| (first..=last).contains(&m.index))
                    .map(|m| (m.index, m.status))
                    .collect();
            s.group_rows_read += members.len();
            members
        })
    }

    fn record_group_mark(
        &self,
        group: GroupKey,
        mark: GroupMark,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.run("group mark write", move |s| {
            // Cassandra's `int` columns.
            stored_group_number(mark.node, "group mark write")?;
            s.table::<Rows>()
                .marks
                .insert((group, mark.level, mark.node), mark.tally);
            Ok(())
        })
        .map(Result::flatten)
        .boxed()
    }

    fn group_marks(
        &self,
        group: GroupKey,
        level: u8,
        first: u32,
        last: u32,
    ) -> BoxFuture<'static, StoreResult<Vec<GroupMark>>> {
        self.run("group read", move |s| {
            marks_between(s, (group.clone(), level, first), (group, level, last))
        })
    }

    fn all_group_marks(&self, group: GroupKey) -> BoxFuture<'static, StoreResult<Vec<GroupMark>>> {
        self.run("group read", move |s| {
            marks_between(s, (group.clone(), 0, 0), (group, u8::MAX, u32::MAX))
        })
    }
}

/// The marks from `first` to `last` (group, level, node), counted as rows read.
fn marks_between(
    s: &mut crate::store::memory::State,
    first: (GroupKey, u8, u32),
    last: (GroupKey, u8, u32),
) -> Vec<GroupMark> {
    let marks: Vec<GroupMark> = (s.table::<Rows>().marks.range(first..=last))
        .map(|((_, level, node), tally)| GroupMark {
            level: *level,
            node: *node,
            tally: *tally,
        })
        .collect();
    s.group_rows_read += marks.len();
    marks
}
