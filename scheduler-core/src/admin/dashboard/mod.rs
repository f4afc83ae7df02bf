//! The dashboard each node serves beside its admin API, on the same listener and behind the
//! same token: HTML rendered here, charts as inline SVG, one embedded style sheet, no script,
//! nothing fetched from elsewhere (it works on a closed network), and no JavaScript toolchain
//! in the build. A page's figures come from the API's own handlers, called with the page's
//! parameters, so they are the API's answer at that moment; actions are plain forms (a redrive
//! is a POST, then a redirect back).
//!
//! | page | what |
//! | --- | --- |
//! | `GET /dashboard[?refresh=N]` | owned partitions with tasks in memory, backlog, Kafka lag, stale and suspended tasks; the dead letters' count; throughput and lateness over the last 15 minutes |
//! | `GET /dashboard/dead-letters` | dead letters not redriven, their count by type, a redrive button each and per type |
//! | `POST /dashboard/dead-letters/redrive` | redrive one (its key) or a type, then back to the list |
//! | `GET /dashboard/groups-jobs[?groupType=&groupId=]` | jobs with their progress; a group's members |
//! | `GET /dashboard/schedules[?id=]` | recurring schedules; one's next and last fires |
//! | `GET /dashboard/limits` | per-key limits: this node's permits, running calls and held tasks per key; the overrides, a remove button each, and a form setting one |
//! | `POST /dashboard/limits/set`, `/remove` | set or remove a key's override, then back to the page |
//! | `GET /dashboard/task?orderingId=&uniquenessKey=[&scheduledTime=]` | a task's status, data and attempts |
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
mod schedules;
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
        .route("/dashboard/groups-jobs", get(groups_jobs::page))
        .route("/dashboard/schedules", get(schedules::page))
        .route("/dashboard/limits", get(limits::page))
        .route("/dashboard/limits/set", post(limits::set))
        .route("/dashboard/limits/remove", post(limits::remove))
        .route("/dashboard/workers", get(workers::page))
        .route("/dashboard/task", get(task::page))
}

#[cfg(test)]
mod tests;
