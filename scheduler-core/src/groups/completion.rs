//! When a group finishes, found in a few reads per member (design.md "Groups"): a tree of marks
//! over the members, [`FANOUT`] children a node. A member writes its outcome, then reads its
//! siblings (the members of its node, at most [`FANOUT`] rows): if all have finished, it marks
//! their node finished (`group_marks`, with how they finished) and reads that node's siblings,
//! and so on up. Whoever marks the root has found the group finished.
//!
//! Each climber writes before it reads, so of the members (or nodes) that finish a node last,
//! concurrently or not, at least one sees all of them: no node is left unmarked once its
//! children have all finished, and marks are idempotent (a node marked twice is marked once).
//! A member run again climbs again, rewriting the marks with what it finds.
//!
//! A node is finished when every child it has is: a group of `total` members has fewer
//! children in the last node of each level, so climbing needs the total. A member that does not
//! carry it reads the group's header after its write; without a total known it climbs only
//! through full nodes. The member that records the total first (it read the header before its
//! write and found none, or its own row: run again, it may have recorded the total itself) then
//! also climbs from the group's last member: the nodes of that path
//! are the only ones a climber without the total could not finish, and of that member and one
//! that stopped there, at least one sees the other's write.

use scheduler_client::wire::MAX_GROUP_NUMBER;

use std::sync::Arc;

use crate::store::group_marks::{children, root_level, FANOUT};
use crate::store::{GroupKey, GroupMark, GroupStore, GroupTally, JobStore, StoreResult, Tables};

/// The tables a group's steps use: its members and marks, and its jobs' progress.
#[derive(Clone)]
pub(crate) struct GroupTables {
    pub(crate) groups: Arc<dyn GroupStore>,
    pub(crate) jobs: Arc<dyn JobStore>,
}

impl From<&Tables> for GroupTables {
    fn from(tables: &Tables) -> Self {
        GroupTables {
            groups: Arc::clone(&tables.groups),
            jobs: Arc::clone(&tables.jobs),
        }
    }
}

/// Whether the group finished, as far as a climb could tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Climb {
    /// The climb marked the root: every member has finished, and finished so.
    Finished(GroupTally),
    /// A node on the way has a child not finished yet (or the total is not known).
    NotYet,
}

/// Climbs the completion tree of `group` from member `index` (whose outcome is written), with
/// the group's `total` if known: marks each node found finished, and says whether the root was.
pub(crate) async fn climb(
    tables: &GroupTables,
    group: &GroupKey,
    index: u32,
    total: Option<u32>,
) -> StoreResult<Climb> {
    // A member beyond the total is none of the group's (as the join counts them).
    if index == 0 || total.is_some_and(|t| index > t) {
        return Ok(Climb::NotYet);
    }
    // The highest level a climb without the total may reach: the largest group's root.
    let top = total.map_or_else(|| root_level(MAX_GROUP_NUMBER), root_level);
    let mut position = index - 1;
    for level in 0..top {
        let node = position / FANOUT;
        let first = node.saturating_mul(FANOUT);
        let last = first.saturating_add(FANOUT - 1);
        let tallies: Vec<GroupTally> = if level == 0 {
            let members = tables
                .groups
                .finished_members(group.clone(), first + 1, last.saturating_add(1))
                .await?;
            (members.into_iter())
                .filter(|(member, _)| total.is_none_or(|t| *member <= t))
                .map(|(_, status)| GroupTally::of(status))
                .collect()
        } else {
            let marks = tables
                .groups
                .group_marks(group.clone(), level, first, last)
                .await?;
            marks.into_iter().map(|mark| mark.tally).collect()
        };
        let expected = children(level + 1, node, total);
        if tallies.len() < expected as usize {
            return Ok(Climb::NotYet);
        }
        let mut tally = tallies
            .into_iter()
            .fold(GroupTally::default(), |a, b| a + b);
        if level == 0 {
            // The items its members reported (a job's buckets), so that a node's mark says
            // what its members did: a list of jobs reads the marks, never the members.
            let reported = tables
                .jobs
                .progress_in(group.clone(), first + 1, last.saturating_add(1))
                .await?;
            tally.items = (reported.iter())
                .filter(|p| total.is_none_or(|t| p.bucket <= t))
                .fold(0u64, |sum, p| sum.saturating_add(p.items));
        }
        let mark = GroupMark {
            level: level + 1,
            node,
            tally,
        };
        tables.groups.record_group_mark(group.clone(), mark).await?;
        if total.is_some() && level + 1 == top {
            return Ok(Climb::Finished(tally));
        }
        position = node;
    }
    Ok(Climb::NotYet)
}
