//! Reading the schedule in pages that never split a group of ties (tasks of one orderingId due at
//! one time) in key order: ties run in enqueue order, which key order does not follow.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use scheduler_client::{RunOrder, Task, TaskKey};

use super::{PartitionId, ReadCursor, ScheduleStore, StoreResult};

/// Rows per read of a group of ties.
const TIE_PAGE: usize = 64;

/// Where loading stands inside a group of ties (tasks of one orderingId due at one time) too
/// large for one page: it goes on in run order, not key order.
#[derive(Debug, Clone)]
pub(crate) struct TieCursor {
    scheduled_time: DateTime<Utc>,
    ordering_id: String,
    /// The run order of the last task loaded from the group.
    after: Option<RunOrder>,
}

impl TieCursor {
    /// Whether `key` sorts before the group (loading has passed it).
    pub(crate) fn is_past(&self, key: &TaskKey) -> bool {
        (key.scheduled_time, &key.ordering_id) < (self.scheduled_time, &self.ordering_id)
    }
}

/// Where the next load starts.
pub(crate) struct NextLoad {
    /// Where the next load starts in key order.
    pub(crate) cursor: ReadCursor,
    /// Set while inside a group of ties (the cursor is before it).
    pub(crate) ties: Option<TieCursor>,
}

/// A page of the schedule.
pub(crate) struct Page {
    /// The tasks read, in key order (a group of ties in run order).
    pub(crate) tasks: Vec<Task>,
    /// Where the next page starts; `None` once everything before the load's `until` was read.
    pub(crate) next: Option<NextLoad>,
}

/// Up to `limit` tasks from `cursor` on, never splitting the ties of one orderingId (same
/// time) between two pages in key order: their run order is their enqueue order, so a tie read
/// later could have to run before one read now. A full page ends before the ties of its last
/// row, which the next page starts with; a group of ties that fills a page on its own is
/// loaded in run order, `limit` at a time (each page of it reads the group again).
pub(crate) async fn load_whole_ties(
    store: Arc<dyn ScheduleStore>,
    partition: PartitionId,
    cursor: ReadCursor,
    ties: Option<TieCursor>,
    until: DateTime<Utc>,
    limit: usize,
) -> StoreResult<Page> {
    if let Some(ties) = ties {
        return load_ties(store, partition, cursor, ties, limit).await;
    }
    let mut tasks = store.load(partition, cursor.clone(), until, limit).await?;
    let Some(last) = tasks.last().map(Task::key).filter(|_| tasks.len() >= limit) else {
        return Ok(Page { tasks, next: None });
    };
    let tied =
        |t: &Task| t.scheduled_time == last.scheduled_time && t.ordering_id == last.ordering_id;
    let group_start = tasks.iter().rposition(|t| !tied(t)).map_or(0, |i| i + 1);
    if group_start > 0 {
        tasks.truncate(group_start);
        let cursor = tasks.last().map_or(cursor, |t| ReadCursor::After(t.key()));
        return Ok(Page {
            tasks,
            next: Some(NextLoad { cursor, ties: None }),
        });
    }
    let ties = TieCursor {
        scheduled_time: last.scheduled_time,
        ordering_id: last.ordering_id,
        after: None,
    };
    load_ties(store, partition, cursor, ties, limit).await
}

/// The next `limit` tasks of a group of ties in run order; `cursor` is where loading stands
/// before the group, and moves past it once the group is loaded.
async fn load_ties(
    store: Arc<dyn ScheduleStore>,
    partition: PartitionId,
    cursor: ReadCursor,
    ties: TieCursor,
    limit: usize,
) -> StoreResult<Page> {
    let group_end = ties.scheduled_time + chrono::TimeDelta::milliseconds(1);
    let mut group: Vec<Task> = Vec::new();
    // Right before the group's first row (uniqueness keys are never empty).
    let mut from = ReadCursor::After(TaskKey {
        scheduled_time: ties.scheduled_time,
        ordering_id: ties.ordering_id.clone(),
        uniqueness_key: String::new(),
    });
    loop {
        let rows = store.load(partition, from, group_end, TIE_PAGE).await?;
        let read = rows.len();
        let last = rows.last().map(Task::key);
        let before = group.len();
        group.extend(
            rows.into_iter()
                .take_while(|t| t.ordering_id == ties.ordering_id),
        );
        match last {
            Some(last) if read >= TIE_PAGE && group.len() - before == read => {
                from = ReadCursor::After(last)
            }
            _ => break,
        }
    }
    let past_group = group
        .iter()
        .map(Task::key)
        .max()
        .map_or(cursor.clone(), ReadCursor::After);
    group.sort_by_cached_key(Task::run_order);
    group.retain(|t| {
        ties.after
            .as_ref()
            .is_none_or(|after| t.run_order() > *after)
    });
    let rest = group.split_off(limit.min(group.len()));
    let next = match group.last() {
        Some(last) if !rest.is_empty() => NextLoad {
            cursor,
            ties: Some(TieCursor {
                after: Some(last.run_order()),
                ..ties
            }),
        },
        _ => NextLoad {
            cursor: past_group,
            ties: None,
        },
    };
    Ok(Page {
        tasks: group,
        next: Some(next),
    })
}
