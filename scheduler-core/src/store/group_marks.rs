//! The shape of a group's completion tree (`group_marks`): which members each mark covers,
//! [`FANOUT`] children a node, and what a set of marks says of the members. How members climb
//! it is [`crate::groups`]'s (its `completion` module); the shape is the table's, read by the
//! admin API and written by the migration that built the tree for older groups.

use scheduler_client::wire::MAX_GROUP_NUMBER;

use super::{GroupMark, GroupTally, TaskStatus};

/// Children of a node of the completion tree: the rows a member reads at each level it climbs.
pub const FANOUT: u32 = 32;

/// How many members a node of `level` covers: `FANOUT^level` (saturated).
fn span(level: u8) -> u32 {
    FANOUT.saturating_pow(u32::from(level))
}

/// The level of the root of a group of `total` members: the least level from 1 whose one node
/// covers them all.
pub(crate) fn root_level(total: u32) -> u8 {
    (1..=u8::MAX)
        .find(|&level| span(level) >= total)
        .unwrap_or(u8::MAX)
}

/// How many children node `node` of `level` (from 1) has in a group of `total`, or
/// [`FANOUT`] when the total is not known (then only a full node can be found finished).
pub(crate) fn children(level: u8, node: u32, total: Option<u32>) -> u32 {
    let Some(total) = total else {
        return FANOUT;
    };
    let child_span = span(level - 1);
    let in_level = total.div_ceil(child_span);
    in_level
        .saturating_sub(node.saturating_mul(FANOUT))
        .min(FANOUT)
}

/// What the marks of a group say of its members: how many finished, how, and the items they
/// reported, counting the members of finished nodes only (those of a node not finished yet are
/// not counted). About one row per [`FANOUT`] members, never a member's row.
pub(crate) fn tally_of_marks(marks: &[GroupMark]) -> GroupTally {
    // Each member counted once, under its highest finished node: a mark with a marked
    // ancestor is counted there.
    let marked: std::collections::BTreeSet<(u8, u32)> =
        marks.iter().map(|m| (m.level, m.node)).collect();
    let top = marks.iter().map(|m| m.level).max().unwrap_or(0);
    marks
        .iter()
        .filter(|m| {
            !(m.level.saturating_add(1)..=top)
                .any(|level| marked.contains(&(level, m.node / span(level - m.level))))
        })
        .fold(GroupTally::default(), |a, m| a + m.tally)
}

/// The marks of every finished node of a group whose finished members are `members` (numbers,
/// statuses and the items they reported), with its `total` if known, level by level: what the
/// climbs of those members would have written. For a group whose members finished before its
/// tree existed (schema version 12's migration writes them).
pub(crate) fn marks_of(members: &[(u32, TaskStatus, u64)], total: Option<u32>) -> Vec<GroupMark> {
    let mut below: std::collections::BTreeMap<u32, GroupTally> = (members.iter())
        .filter(|(index, _, _)| *index >= 1 && total.is_none_or(|t| *index <= t))
        .map(|(index, status, items)| {
            let tally = GroupTally {
                items: *items,
                ..GroupTally::of(*status)
            };
            (index - 1, tally)
        })
        .collect();
    let top = total.map_or_else(|| root_level(MAX_GROUP_NUMBER), root_level);
    let mut marks = Vec::new();
    for level in 1..=top {
        let mut nodes: std::collections::BTreeMap<u32, (u32, GroupTally)> = Default::default();
        for (position, tally) in &below {
            let entry = nodes.entry(position / FANOUT).or_default();
            entry.0 += 1;
            entry.1 = entry.1 + *tally;
        }
        below = nodes
            .into_iter()
            .filter(|(node, (count, _))| *count >= children(level, *node, total))
            .map(|(node, (_, tally))| (node, tally))
            .collect();
        marks.extend(below.iter().map(|(node, tally)| GroupMark {
            level,
            node: *node,
            tally: *tally,
        }));
    }
    marks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tree_has_the_levels_and_children_its_total_needs() {
        assert_eq!(
            [1, 32, 33, 1024, 1025, 10_000].map(root_level),
            [1, 1, 2, 2, 3, 3]
        );
        // 33 members: the level-1 nodes have 32 and 1; the root has 2.
        assert_eq!(children(1, 0, Some(33)), 32);
        assert_eq!(children(1, 1, Some(33)), 1);
        assert_eq!(children(2, 0, Some(33)), 2);
        assert_eq!(children(1, 0, None), FANOUT);
        assert_eq!(children(3, 0, Some(10_000)), 10);
    }

    #[test]
    fn marks_count_each_member_once_under_its_highest_finished_node() {
        let mark = |level, node, completed| GroupMark {
            level,
            node,
            tally: GroupTally {
                completed,
                ..GroupTally::default()
            },
        };
        // Members 1-32 and 33-64 finished, and so did 1-1,024 (their level-2 node is marked,
        // and so are its children), and 1,025-1,056 apart.
        let marks = [
            mark(1, 0, 32),
            mark(1, 1, 32),
            mark(1, 32, 32),
            mark(2, 0, 1024),
        ];
        assert_eq!(tally_of_marks(&marks).completed, 1024 + 32);
        assert_eq!(tally_of_marks(&marks[..2]).completed, 64);
    }

    #[test]
    fn marks_of_a_group_are_what_its_members_climbs_would_write() {
        use crate::store::TaskStatus::{Completed, Failed};
        // 40 of 40 finished: 32 and 8 at level 1 (one failed), the root at level 2.
        let members: Vec<(u32, TaskStatus, u64)> = (1..=40)
            .map(|i| (i, if i == 7 { Failed } else { Completed }, 10))
            .collect();
        let marks = marks_of(&members, Some(40));
        let levels: Vec<(u8, u32, u32)> = marks
            .iter()
            .map(|m| (m.level, m.node, m.tally.finished()))
            .collect();
        assert_eq!(levels, [(1, 0, 32), (1, 1, 8), (2, 0, 40)]);
        assert_eq!((marks[2].tally.failed, marks[2].tally.items), (1, 400));
        // Member 35 not finished: the second node and the root are not.
        let some: Vec<_> = members
            .iter()
            .copied()
            .filter(|(i, _, _)| *i != 35)
            .collect();
        assert_eq!(marks_of(&some, Some(40)).len(), 1);
        // Without the total, only the full node.
        assert_eq!(marks_of(&members, None).len(), 1);
    }
}
