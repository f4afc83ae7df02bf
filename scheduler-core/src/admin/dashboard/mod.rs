//! The dashboard each node serves beside its admin API, on the same listener and behind the
//! same token: HTML rendered here, charts as inline SVG, one embedded style sheet, no script,
//! nothing fetched from elsewhere (it works on a closed network), and no JavaScript toolchain
//! in the build. A page's figures come from the API's own handlers, called with the page's
//! parameters, so they are the API's answer at that moment; actions are plain forms (a redrive
//! is a POST, then a redirect back; one acting on many, or deleting, has a checkbox to tick
//! first, which the browser requires and the node checks). Times show how far they are from
//! now beside them.
//!
//! | page | what |
//! | --- | --- |
//! | `GET /dashboard[?refresh=N]` | owned partitions with tasks in memory, backlog, Kafka lag, stale and suspended tasks; the dead letters' count; throughput and lateness over the last 15 minutes |
//! | `GET /dashboard/pending[?window=&state=&taskType=&orderingId=&internal=]` | tasks not done yet in a window around now, by type, state (waiting, overdue, retrying, suspended, limited) or orderingId, a page at a time; this node's retrying set with each next attempt |
//! | `GET /dashboard/dead-letters[?view=redriven]` | dead letters not redriven (or those redriven), their count by type, a redrive button and a checkbox each, redrive and purge per type (confirmed) |
//! | `POST /dashboard/dead-letters/redrive` | redrive one (its key), or redrive or purge a type (confirmed), then back to the list |
//! | `POST /dashboard/dead-letters/selected` | redrive, or purge (confirmed), the ticked letters, then back to the list |
//! | `GET /dashboard/suspensions` | the suspensions in force, a resume button each; a form suspending an orderingId, a type or a group |
//! | `POST /dashboard/suspensions/resume`, `/suspend` | lift or add one, then back to the list |
//! | `GET /dashboard/groups-jobs[?groupType=&groupId=]` | jobs with their progress; a group's members |
//! | `GET /dashboard/schedules[?id=]` | recurring schedules, a pause or resume button each; one's next and last fires |
//! | `POST /dashboard/schedules/pause`, `/resume` | pause or resume one, then back to the list |
//! | `GET /dashboard/limits` | per-key limits: this node's permits, running calls and held tasks per key; the overrides, a remove button each, and a form setting one |
//! | `POST /dashboard/limits/set`, `/remove` | set or remove a key's override, then back to the page |
//! | `GET /dashboard/task?orderingId=&uniquenessKey=[&scheduledTime=]` | a task's status, data and attempts; a pending one's cancel (confirmed) and, for an identity's, move buttons |
//! | `POST /dashboard/task/cancel`, `/reschedule` | cancel a task, or move an identity's pending task, then back to it |
//! | `GET`, `POST /dashboard/login`; `POST /dashboard/logout` | the token as a cookie (see [`login`]) |
//!
//! Each queue's at `/queues/<name>/dashboard`, like its API; `/` redirects to `/dashboard`.

use std::sync::Arc;

use axum::response::Redirect;
use axum::routing::{get, post};
use axum::Router;

mod dead_letters;
mod groups_jobs;
pub(crate) mod history;
mod html;
mod limits;
pub(crate) mod login;
mod metrics_text;
mod overview;
mod pending;
mod schedules;
mod suspensions;
mod svg;
mod task;
mod workers;

use crate::admin::state::AdminState;

/// The dashboard's routes, merged into each queue's.
pub(crate) fn routes() -> Router<Arc<AdminState>> {
    Router::new()
        .route(
            "/",
            get(|page: html::Page| async move { Redirect::to(&page.url("")) }),
        )
        .route("/dashboard", get(overview::page))
        .route("/dashboard/login", get(login::page).post(login::submit))
        .route("/dashboard/logout", post(login::logout))
        .route("/dashboard/dead-letters", get(dead_letters::page))
        .route(
            "/dashboard/dead-letters/redrive",
            post(dead_letters::redrive),
        )
        .route(
            "/dashboard/dead-letters/selected",
            post(dead_letters::selected),
        )
        .route("/dashboard/pending", get(pending::page))
        .route("/dashboard/suspensions", get(suspensions::page))
        .route("/dashboard/suspensions/resume", post(suspensions::resume))
        .route("/dashboard/suspensions/suspend", post(suspensions::suspend))
        .route("/dashboard/groups-jobs", get(groups_jobs::page))
        .route("/dashboard/schedules", get(schedules::page))
        .route("/dashboard/schedules/pause", post(schedules::pause))
        .route("/dashboard/schedules/resume", post(schedules::resume))
        .route("/dashboard/limits", get(limits::page))
        .route("/dashboard/limits/set", post(limits::set))
        .route("/dashboard/limits/remove", post(limits::remove))
        .route("/dashboard/workers", get(workers::page))
        .route("/dashboard/task", get(task::page))
        .route("/dashboard/task/cancel", post(task::cancel))
        .route("/dashboard/task/reschedule", post(task::reschedule))
}

#[cfg(test)]
mod tests;
