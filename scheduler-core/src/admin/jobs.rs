//! Jobs: `GET /api/v1/jobs` lists the queue's jobs with their progress, `GET /api/v1/jobs/{id}`
//! shows one with its failed buckets and why. One job's progress is read from its group (buckets
//! finished, failed and why), the buckets' progress reports (items) and the suspensions. The
//! list reads each job's completion marks instead (`groups::completion`): about one row per 32
//! buckets, counting the buckets of finished nodes of 32 (issue 30, defect 9).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::Json;

use super::api::{BucketError, JobView, JobsResponse};
use super::state::{store_error, AdminState, ApiError};
use crate::store::{GroupTally, JobRecord, MemberOutcome, SuspensionTarget, Suspensions};

/// Most failed buckets one job's answer lists (the counts cover all).
const MAX_ERRORS: usize = 100;

/// `GET /api/v1/jobs`
pub(super) async fn list(
    State(state): State<Arc<AdminState>>,
) -> Result<Json<JobsResponse>, ApiError> {
    let jobs = state.store.jobs().await.map_err(store_error)?;
    let suspensions = suspensions(&state).await?;
    let mut views = Vec::with_capacity(jobs.len());
    for job in jobs {
        let marks = (state.store.all_group_marks(job.group.clone()).await).map_err(store_error)?;
        let tally = crate::store::group_marks::tally_of_marks(&marks);
        views.push(summary(job, tally, Vec::new(), &suspensions));
    }
    Ok(Json(JobsResponse { jobs: views }))
}

/// `GET /api/v1/jobs/{id}`
pub(super) async fn show(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
) -> Result<Json<JobView>, ApiError> {
    let job = state.store.job(id.clone()).await.map_err(store_error)?;
    let job = job.ok_or_else(|| ApiError::not_found(format!("no job {id:?}")))?;
    let suspensions = suspensions(&state).await?;
    Ok(Json(view(&state, job, &suspensions).await?))
}

async fn suspensions(state: &AdminState) -> Result<Suspensions, ApiError> {
    let all = state.store.suspensions().await.map_err(store_error)?;
    Ok(Suspensions::new(all))
}

/// A job with its progress now, every bucket read.
async fn view(
    state: &AdminState,
    job: JobRecord,
    suspensions: &Suspensions,
) -> Result<JobView, ApiError> {
    let group = state
        .store
        .group(job.group.clone())
        .await
        .map_err(store_error)?;
    let progress = state
        .store
        .progress(job.group.clone())
        .await
        .map_err(store_error)?;
    let members: Vec<MemberOutcome> = group.map(|g| g.members).unwrap_or_default();
    let mut tally = (members.iter())
        .map(|m| GroupTally::of(m.status))
        .fold(GroupTally::default(), |a, b| a + b);
    tally.items = progress.iter().map(|p| p.items).sum();
    let errors = (members.iter())
        .filter(|m| m.is_failure())
        .take(MAX_ERRORS)
        .map(|m| BucketError {
            bucket: m.index,
            task: m.key.to_string(),
            status: m.status.as_str().to_string(),
            error: m.error.clone().unwrap_or_default(),
        })
        .collect();
    Ok(summary(job, tally, errors, suspensions))
}

/// A job's view from how its buckets finished (`tally`) and its failed buckets' `errors`.
fn summary(
    job: JobRecord,
    tally: GroupTally,
    errors: Vec<BucketError>,
    suspensions: &Suspensions,
) -> JobView {
    let finished = tally.finished() as usize;
    let target = SuspensionTarget::Group {
        task_type: job.group.task_type.clone(),
        id: job.group.id.clone(),
    };
    let suspended = suspensions.all().any(|s| s.target == target);
    let buckets = job.buckets as usize;
    let state_name = match (finished >= buckets, tally.failed == 0, suspended) {
        (true, true, _) => "completed",
        (true, false, _) => "failed",
        (false, _, true) => "suspended",
        (false, _, false) => "running",
    };
    JobView {
        id: job.id,
        state: state_name.to_string(),
        coordinator: job.coordinator.to_string(),
        task_type: job.group.task_type.clone(),
        group: job.group.id.clone(),
        started_at: scheduler_client::wire::format_time(job.started_at),
        buckets: job.buckets,
        completed: tally.completed as usize,
        failed: tally.failed as usize,
        cancelled: tally.cancelled as usize,
        pending: buckets.saturating_sub(finished),
        items: tally.items,
        suspended,
        errors,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::extract::State;
    use chrono::Utc;
    use scheduler_client::{GroupMember, Task, TaskData};

    use crate::admin::test_app::state;
    use crate::enqueue::{Enqueuer, Outbox};
    use crate::store::memory::MemoryStore;
    use crate::store::{BucketProgress, JobRecord, JobStore, MemberOutcome, TaskStatus};

    /// A job of 2,000 buckets, every one finished (bucket 7 failed) after reporting 10 items:
    /// the list reads about one row per 32 buckets, not every bucket (issue 30, defect 9).
    #[tokio::test]
    async fn the_job_list_reads_a_row_per_32_buckets_not_every_bucket() {
        let store = Arc::new(MemoryStore::new());
        let now = Utc::now();
        let buckets = 2_000;
        let coordinator = Task::new("c", now, "run", TaskData::new()).of_type("job");
        let group = crate::groups::children_of(&coordinator);
        store
            .record_job(JobRecord {
                id: "big".into(),
                coordinator: coordinator.key(),
                group: group.clone(),
                buckets,
                started_at: now,
            })
            .await
            .expect("job");
        for index in 1..=buckets {
            let member = GroupMember::new(group.id.clone(), index)
                .of(buckets)
                .joined_by("job");
            let task = Task::new(format!("b{index}"), now, "bucket", TaskData::new())
                .of_type("bucket")
                .in_group(member.clone());
            let progress = BucketProgress {
                bucket: index,
                items: 10,
                at: now,
            };
            store
                .record_progress(group.clone(), progress)
                .await
                .expect("progress");
            let status = if index == 7 {
                TaskStatus::Failed
            } else {
                TaskStatus::Completed
            };
            let outcome = MemberOutcome {
                index,
                key: task.key(),
                status,
                error: (index == 7).then(|| "asked to fail".to_string()),
                result: None,
                finished_at: now,
            };
            let shared = crate::groups::GroupTables::from(&crate::store::Tables::of(&store));
            let enqueuer: Arc<dyn Enqueuer> = Arc::new(Outbox::default());
            crate::groups::member_finished(shared, enqueuer, task, member, outcome, now)
                .await
                .expect("finished");
        }
        let before = store.group_rows_read();
        let answer = super::list(State(Arc::new(state(store.clone()))))
            .await
            .expect("listed")
            .0;
        let read = store.group_rows_read() - before;
        let job = &answer.jobs[0];
        assert_eq!(
            (job.completed, job.failed, job.pending, job.items),
            (1_999, 1, 0, 20_000)
        );
        assert_eq!(job.state, "failed");
        assert!(
            read <= 80,
            "{read} rows read to list a job of {buckets} buckets"
        );
    }
}
