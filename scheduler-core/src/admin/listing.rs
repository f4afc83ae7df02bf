//! `GET /api/v1/tasks`: the incomplete tasks due in a window, across every partition, in
//! task-key order, a page at a time, each with where it stands (waiting, overdue, retrying,
//! suspended, limited). Each page reads the first `limit` rows of every partition (of the one
//! partition of an `orderingId` asked for) after the cursor (`LIST_CONCURRENCY` partitions at a
//! time) and keeps the `limit` smallest keys as the reads come in, so memory holds `limit` rows
//! plus the reads under way. `GET /api/v1/tasks/retrying`: this node's retrying set.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::Json;
use chrono::{DateTime, TimeDelta, Utc};
use futures::{StreamExt, TryStreamExt};
use scheduler_client::{partition_for, truncate_to_millis, wire, Task, TaskKey};
use serde_json::Value;

use super::api::{
    ListQuery, ListResponse, ListedTask, PageCursor, PendingState, RetryView, RetryingResponse,
    RetryingTask,
};
use super::state::{parse_rfc3339, required, store_error, AdminState, ApiError};
use crate::recurring::TICK_TYPE;
use crate::retrying::{Retrying, RetryingTasks};
use crate::store::{PartitionId, ReadCursor, Suspensions};

/// Largest page of `GET /api/v1/tasks`.
pub(super) const MAX_PAGE: usize = 1000;
/// Partitions read at once when listing.
const LIST_CONCURRENCY: usize = 16;
/// The widest window `GET /api/v1/tasks` reads: a load walks one hour bucket per query.
const MAX_LIST_WINDOW_DAYS: i64 = 31;

/// `from` must be before `to`, at most `MAX_LIST_WINDOW_DAYS` before.
fn check_window(from: DateTime<Utc>, to: DateTime<Utc>) -> Result<(), ApiError> {
    if from >= to {
        return Err(ApiError::bad_request("from must be earlier than to"));
    }
    if to - from > TimeDelta::days(MAX_LIST_WINDOW_DAYS) {
        return Err(ApiError::bad_request(format!(
            "the window may span at most {MAX_LIST_WINDOW_DAYS} days ({} hour buckets); page through a longer one",
            MAX_LIST_WINDOW_DAYS * 24
        )));
    }
    Ok(())
}

/// The `limit` tasks with the smallest keys among those offered.
struct SmallestKeys {
    limit: usize,
    kept: std::collections::BTreeMap<TaskKey, (PartitionId, Task)>,
}

impl SmallestKeys {
    fn new(limit: usize) -> Self {
        SmallestKeys {
            limit,
            kept: std::collections::BTreeMap::new(),
        }
    }

    fn offer(&mut self, partition: PartitionId, task: Task) {
        self.kept.insert(task.key(), (partition, task));
        if self.kept.len() > self.limit {
            self.kept.pop_last();
        }
    }

    fn into_sorted(self) -> Vec<(PartitionId, Task)> {
        self.kept.into_values().collect()
    }
}

fn parse_time(value: Option<String>, name: &str) -> Result<DateTime<Utc>, ApiError> {
    parse_rfc3339(&required(value, name)?, name)
}

/// Incomplete tasks due in `[from, to)` across all partitions (or the one of `orderingId`),
/// in task-key order, a page at a time, each with where it stands. A page resumes after the
/// key given by `from`, `fromOrderingId` and `fromUniquenessKey`. The filters (type,
/// orderingId, state, the engine's own tasks) apply to the rows a page read, so a page may hold
/// fewer than `limit` tasks: `next` goes on from the last row read.
pub(super) async fn tasks(
    State(state): State<Arc<AdminState>>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<ListResponse>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let from = parse_time(query.from, "from")?;
    let to = parse_time(query.to, "to")?;
    check_window(from, to)?;
    let limit = query.limit.unwrap_or(100);
    if limit == 0 || limit > MAX_PAGE {
        return Err(ApiError::bad_request(format!(
            "limit must be between 1 and {MAX_PAGE}"
        )));
    }
    let cursor = match (query.from_ordering_id, query.from_uniqueness_key) {
        (None, None) => ReadCursor::From(from),
        (Some(ordering_id), Some(uniqueness_key)) => ReadCursor::After(TaskKey {
            scheduled_time: truncate_to_millis(from),
            ordering_id,
            uniqueness_key,
        }),
        _ => return Err(ApiError::bad_request(
            "fromOrderingId and fromUniquenessKey go together (the key the previous page ended at)",
        )),
    };
    let ordering_id = query.ordering_id.filter(|o| !o.is_empty());
    // One orderingId's tasks are all in its partition: only that one is read.
    let partitions: Vec<PartitionId> = match &ordering_id {
        Some(o) => vec![partition_for(o, state.partition_count)],
        None => (0..state.partition_count as PartitionId).collect(),
    };
    // Each partition's first `limit` tasks after the cursor; the page is the first `limit` of
    // all, kept as the reads come in, so memory holds `limit` rows plus the reads under way,
    // not partitions x limit.
    let reads = partitions.into_iter().map(|partition| {
        let read = state.store.load(partition, cursor.clone(), to, limit);
        async move { read.await.map(|tasks| (partition, tasks)) }
    });
    let page = futures::stream::iter(reads)
        .buffer_unordered(LIST_CONCURRENCY)
        .try_fold(SmallestKeys::new(limit), |mut page, (partition, tasks)| {
            for task in tasks {
                page.offer(partition, task);
            }
            futures::future::ready(Ok(page))
        })
        .await
        .map_err(store_error)?;
    let read = page.into_sorted();
    let next = (read.len() == limit)
        .then(|| read.last())
        .flatten()
        .map(|(_, last)| PageCursor {
            from: wire::format_time(last.scheduled_time),
            from_ordering_id: last.ordering_id.clone(),
            from_uniqueness_key: last.uniqueness_key.clone(),
        });
    let internal = query.include_internal.unwrap_or(false);
    let candidates: Vec<(PartitionId, Task)> = read
        .into_iter()
        .filter(|(_, t)| ordering_id.as_ref().is_none_or(|o| *o == t.ordering_id))
        .filter(|(_, t)| query.task_type.as_ref().is_none_or(|ty| *ty == t.task_type))
        .filter(|(_, t)| internal || !is_internal(t))
        .collect();
    // A finished task normally leaves the schedule; one whose removal failed is filtered here.
    let statuses = futures::future::try_join_all(
        candidates
            .iter()
            .map(|(p, t)| state.store.status(*p, t.key())),
    )
    .await
    .map_err(store_error)?;
    let standing = Standing::now(&state).await?;
    let tasks = candidates
        .into_iter()
        .zip(statuses)
        .filter(|(_, status)| status.is_none())
        .map(|((partition, task), _)| standing.listed(partition, task))
        .filter(|listed| query.state.is_none_or(|s| s == listed.state))
        .collect();
    Ok(Json(ListResponse { tasks, next }))
}

/// The engine's own tasks: a recurring schedule's ticks.
fn is_internal(task: &Task) -> bool {
    task.task_type == TICK_TYPE
}

/// What says where a pending task stands, read once a page: the suspensions in force, this
/// node's retrying set and limits, and the time.
struct Standing {
    now: DateTime<Utc>,
    suspensions: Suspensions,
    retrying: Option<RetryingTasks>,
    limits: Option<crate::limits::Limits>,
}

impl Standing {
    async fn now(state: &AdminState) -> Result<Standing, ApiError> {
        let suspensions = state.store.suspensions().await.map_err(store_error)?;
        Ok(Standing {
            now: Utc::now(),
            suspensions: Suspensions::new(suspensions),
            retrying: state.retrying.clone(),
            limits: state.limits.clone(),
        })
    }

    fn listed(&self, partition: PartitionId, task: Task) -> ListedTask {
        let retry = (self.retrying.as_ref()).and_then(|r| r.of(&task.key()));
        let suspension = self.suspensions.of(&task);
        let state = if suspension.is_some() {
            PendingState::Suspended
        } else if retry.is_some() {
            PendingState::Retrying
        } else if task.scheduled_time > self.now {
            PendingState::Waiting
        } else if self.limits.as_ref().is_some_and(|l| l.holds(&task)) {
            PendingState::Limited
        } else {
            PendingState::Overdue
        };
        ListedTask {
            suspended_by: suspension.map(|s| format!("{}:{}", s.target.kind(), s.target.target())),
            retry: retry.map(|r| retry_view(&r)),
            state,
            ordering_id: task.ordering_id,
            scheduled_time: wire::format_time(task.scheduled_time),
            uniqueness_key: task.uniqueness_key,
            partition,
            task_type: task.task_type,
            task_data: Value::Object(task.task_data),
        }
    }
}

fn retry_view(retry: &Retrying) -> RetryView {
    RetryView {
        attempts: retry.attempts,
        next_attempt_at: wire::format_time(retry.next_attempt_at),
        error: retry.error.clone(),
    }
}

/// Most tasks `GET /api/v1/tasks/retrying` lists.
const MAX_RETRYING: usize = 1000;

/// `GET /api/v1/tasks/retrying`: this node's tasks waiting for their next attempt, the soonest
/// due first.
pub(super) async fn retrying(State(state): State<Arc<AdminState>>) -> Json<RetryingResponse> {
    let listed = (state.retrying.as_ref())
        .map(RetryingTasks::list)
        .unwrap_or_default();
    let total = listed.len();
    let tasks = (listed.into_iter().take(MAX_RETRYING))
        .map(|(key, retry)| RetryingTask {
            scheduled_time: wire::format_time(key.scheduled_time),
            ordering_id: key.ordering_id,
            uniqueness_key: key.uniqueness_key,
            partition: retry.partition,
            task_type: retry.task_type.clone(),
            retry: retry_view(&retry),
        })
        .collect();
    Json(RetryingResponse { tasks, total })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    #[test]
    fn a_listing_window_is_bounded_and_a_page_keeps_only_its_limit() {
        let t = |s: &str| DateTime::parse_from_rfc3339(s).map(|t| t.with_timezone(&Utc));
        let (from, to) = (t("2020-01-01T00:00:00Z"), t("2030-01-01T00:00:00Z"));
        let err = check_window(from.expect("time"), to.expect("time")).unwrap_err();
        assert_eq!(err.status, StatusCode::BAD_REQUEST);
        assert!(err.message.contains("at most 31 days"), "{}", err.message);
        let mut page = SmallestKeys::new(3);
        for (p, n) in [(0, 5), (1, 1), (2, 4), (0, 2), (1, 9), (2, 3)] {
            let at = Utc::now() + TimeDelta::seconds(n);
            page.offer(p, Task::new("o", at, n.to_string(), Default::default()));
        }
        let kept: Vec<String> = page
            .into_sorted()
            .into_iter()
            .map(|(_, t)| t.uniqueness_key)
            .collect();
        assert_eq!(kept, ["1", "2", "3"]);
    }
}
