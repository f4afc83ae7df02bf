//! `GET /dashboard/groups-jobs`: the queue's jobs with their progress, as the jobs API answers
//! them (the same handler), and a group looked up by its join type and id
//! (`?groupType=&groupId=`): its members' outcomes so far, read from the store as a join reads
//! them. (The store lists no groups, only a group by its key; a job's row links to its group.)

use std::fmt::Write;
use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;
use scheduler_client::wire;
use serde::Deserialize;

use super::html::{escape, or_dash, query, Page, Section};
use crate::admin::api::JobView;
use crate::admin::state::{store_error, AdminState, ApiError};
use crate::store::{GroupKey, GroupState, TaskStatus};

/// The page's query: the group to show.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GroupQuery {
    group_type: Option<String>,
    group_id: Option<String>,
}

/// `GET /dashboard/groups-jobs`
pub(crate) async fn page(
    State(state): State<Arc<AdminState>>,
    page: Page,
    query: Result<Query<GroupQuery>, QueryRejection>,
) -> Response {
    let title = "Groups & jobs";
    let fail = |e: ApiError| page.error(e.status, Section::GroupsJobs, title, &e.message);
    let Query(query) = match query {
        Ok(q) => q,
        Err(e) => return fail(ApiError::bad_request(e.body_text())),
    };
    let jobs = match crate::admin::jobs::list(State(Arc::clone(&state))).await {
        Ok(Json(jobs)) => jobs.jobs,
        Err(e) => return fail(e),
    };
    let mut html = String::from("<h2>Jobs</h2>\n");
    html.push_str(&jobs_table(&page, &jobs));
    let group_type = query.group_type.unwrap_or_default();
    let group_id = query.group_id.unwrap_or_default();
    let _ = writeln!(
        html,
        "<h2>A group</h2><form class=\"lookup\" method=\"get\" action=\"{}\">\
         <label>Join type <input id=\"group-type\" name=\"groupType\" value=\"{}\" required></label>\
         <label>Group id <input id=\"group-id\" name=\"groupId\" value=\"{}\" required></label>\
         <button id=\"show-group\" type=\"submit\">Show</button></form>",
        escape(&page.url("/groups-jobs")),
        escape(&group_type),
        escape(&group_id),
    );
    if !group_type.is_empty() && !group_id.is_empty() {
        let key = GroupKey {
            task_type: group_type,
            id: group_id,
        };
        match state.store.group(key.clone()).await.map_err(store_error) {
            Ok(group) => html.push_str(&group_section(&page, &key, group.as_ref())),
            Err(e) => return fail(e),
        }
    }
    page.render(StatusCode::OK, Section::GroupsJobs, title, "", &html)
}

/// A bar of `done` out of `total`, the failed part apart.
fn progress_bar(completed: usize, failed: usize, total: usize) -> String {
    let percent = |n: usize| {
        if total == 0 {
            0.0
        } else {
            100.0 * n as f64 / total as f64
        }
    };
    format!(
        "<div class=\"bar\" title=\"{completed} completed, {failed} failed of {total}\">\
         <span class=\"ok\" style=\"width:{:.1}%\"></span><span class=\"bad\" style=\"width:{:.1}%\"></span></div>",
        percent(completed),
        percent(failed)
    )
}

/// The jobs as a table, one row each, with their failed buckets under it.
pub(crate) fn jobs_table(page: &Page, jobs: &[JobView]) -> String {
    if jobs.is_empty() {
        return "<p class=\"muted\" id=\"no-jobs\">No job within the status retention.</p>\n"
            .into();
    }
    let mut html = String::from(
        "<table id=\"jobs\"><thead><tr><th>Job</th><th>State</th><th>Progress</th><th>Buckets</th>\
         <th>Completed</th><th>Failed</th><th>Cancelled</th><th>Pending</th><th>Items</th>\
         <th>Started</th><th>Group</th></tr></thead><tbody>\n",
    );
    for job in jobs {
        let group = page.url(&format!(
            "/groups-jobs?{}",
            query(&[("groupType", &job.task_type), ("groupId", &job.group)])
        ));
        let finished = job.completed + job.failed + job.cancelled;
        let _ = writeln!(
            html,
            "<tr class=\"job\" data-job=\"{id}\"><td><code>{id}</code></td>\
             <td data-field=\"state\"><span class=\"status {s}\">{s}</span></td><td>{}</td>\
             <td data-field=\"buckets\">{}</td><td data-field=\"completed\">{}</td>\
             <td data-field=\"failed\">{}</td><td data-field=\"cancelled\">{}</td>\
             <td data-field=\"pending\">{}</td><td data-field=\"items\">{}</td><td>{}</td>\
             <td class=\"key\"><a href=\"{}\">{}/{}</a></td></tr>",
            progress_bar(job.completed, job.failed, job.buckets as usize),
            job.buckets,
            job.completed,
            job.failed,
            job.cancelled,
            job.pending,
            job.items,
            escape(&job.started_at),
            escape(&group),
            escape(&job.task_type),
            escape(&job.group),
            id = escape(&job.id),
            s = escape(&job.state),
        );
        if job.failed > 0 {
            // The list counts them (by finished nodes of 32 buckets); their errors are the
            // group's, shown below when asked for (the list reads no bucket's row).
            let _ = writeln!(
                html,
                "<tr class=\"job-errors\"><td colspan=\"11\">{} failed bucket{} ({finished} of \
                 {} finished): their errors in <a href=\"{}\">its group</a> or \
                 <code>scheduler jobs show {}</code></td></tr>",
                job.failed,
                if job.failed == 1 { "" } else { "s" },
                job.buckets,
                escape(&group),
                escape(&job.id),
            );
        }
    }
    html.push_str("</tbody></table>\n");
    html
}

/// A group's header and its finished members.
pub(crate) fn group_section(page: &Page, key: &GroupKey, group: Option<&GroupState>) -> String {
    let Some(group) = group else {
        return format!(
            "<p class=\"muted\" id=\"group-unknown\">No member of group <code>{}</code> has \
             finished (or its rows expired).</p>\n",
            escape(&key.to_string())
        );
    };
    let failed = group.members.iter().filter(|m| m.is_failure()).count();
    let completed = (group.members.iter())
        .filter(|m| m.status == TaskStatus::Completed)
        .count();
    let total = group.total.map(|t| t.to_string());
    let mut html = format!(
        "<section id=\"group\"><h3><code>{}</code></h3><dl class=\"facts\">\
         <dt>Finished</dt><dd><span id=\"group-finished\">{}</span> of <span id=\"group-total\">{}</span></dd>\
         <dt>Failed</dt><dd id=\"group-failed\">{failed}</dd><dt>State</dt><dd>{}</dd>\
         <dt>Fail-fast</dt><dd>{}</dd></dl>{}\n",
        escape(&key.to_string()),
        group.members.len(),
        or_dash(total.as_deref()),
        if group.is_finished() {
            "finished: its join is enqueued"
        } else {
            "members still to finish"
        },
        match (group.fail_fast, group.failed_by) {
            (false, _) => "no".to_string(),
            (true, None) => "yes".to_string(),
            (true, Some(by)) => format!("yes; member {by} failed it"),
        },
        progress_bar(
            completed,
            failed,
            group.total.map_or(group.members.len(), |t| t as usize)
        ),
    );
    html.push_str(
        "<table id=\"group-members\"><thead><tr><th>Member</th><th>Task</th><th>Status</th>\
         <th>Error</th><th>Finished at</th></tr></thead><tbody>\n",
    );
    for m in &group.members {
        let time = wire::format_time(m.key.scheduled_time);
        let _ = writeln!(
            html,
            "<tr><td>{}</td><td class=\"key\"><a href=\"{}\"><code>{}</code></a></td>\
             <td><span class=\"status {s}\">{s}</span></td><td class=\"error-text\">{}</td><td>{}</td></tr>",
            m.index,
            escape(&page.task_url(&m.key.ordering_id, &time, &m.key.uniqueness_key)),
            escape(&m.key.to_string()),
            or_dash(m.error.as_deref()),
            escape(&wire::format_time(m.finished_at)),
            s = m.status.as_str(),
        );
    }
    html.push_str("</tbody></table></section>\n");
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_shows_its_progress_and_links_to_its_group() {
        let job = JobView {
            id: "nightly-1".into(),
            state: "running".into(),
            coordinator: "c/2026-03-01T12:00:00.000Z/r".into(),
            task_type: "coordinator".into(),
            group: "sub-<x>".into(),
            started_at: "2026-03-01T12:00:00.000Z".into(),
            buckets: 4,
            completed: 2,
            failed: 1,
            cancelled: 0,
            pending: 1,
            items: 250,
            suspended: false,
            // As the list answers: no bucket's row read, so no errors.
            errors: Vec::new(),
        };
        let html = jobs_table(&Page::plain(), &[job]);
        for expected in [
            "data-job=\"nightly-1\"",
            "<td data-field=\"completed\">2</td><td data-field=\"failed\">1</td>",
            "<td data-field=\"items\">250</td>",
            "style=\"width:50.0%\"></span><span class=\"bad\" style=\"width:25.0%\"",
            "href=\"/dashboard/groups-jobs?groupType=coordinator&amp;groupId=sub-%3Cx%3E\"",
            "coordinator/sub-&lt;x&gt;",
            "1 failed bucket (3 of 4 finished): their errors in <a \
             href=\"/dashboard/groups-jobs?groupType=coordinator&amp;groupId=sub-%3Cx%3E\">its group</a>",
            "<code>scheduler jobs show nightly-1</code>",
        ] {
            assert!(html.contains(expected), "{expected} missing from {html}");
        }
    }
}
