//! `GET /dashboard/workers`: the node's remote workers (design.md "Remote workers"), as
//! `GET /api/v1/workers` answers: each connected worker's types, capacity, when it was last
//! seen and its live claims (task, attempt, expiry, last heartbeat); and the tasks offered and
//! not claimed yet, by type.

use std::fmt::Write;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;

use super::html::{escape, or_dash, Page, Section};
use crate::admin::state::AdminState;
use crate::admin::workers;

const TITLE: &str = "Remote workers";

/// `GET /dashboard/workers`
pub(crate) async fn page(State(state): State<Arc<AdminState>>, page: Page) -> Response {
    let listed = match workers::list(State(state)).await {
        Ok(Json(listed)) => listed,
        Err(e) => return page.error(e.status, Section::Workers, TITLE, &e.message),
    };
    let mut html = String::new();
    if listed.workers.is_empty() {
        html.push_str("<p class=\"muted\" id=\"no-workers\">No remote worker connected.</p>\n");
    } else {
        html.push_str(
            "<table id=\"workers\"><thead><tr><th>Worker</th><th>Types</th><th>Capacity</th>\
             <th>Last seen</th><th>Polling</th><th>Claims</th></tr></thead><tbody>\n",
        );
        for w in &listed.workers {
            let _ = writeln!(
                html,
                "<tr class=\"worker\" data-worker=\"{name}\"><td><code>{name}</code></td><td>{}</td>\
                 <td>{}</td><td>{}</td><td>{}</td><td data-field=\"claims\">{}</td></tr>",
                escape(&w.types.join(", ")),
                w.capacity,
                escape(&w.last_seen),
                w.polling,
                w.claims.len(),
                name = escape(&w.worker),
            );
        }
        html.push_str("</tbody></table>\n");
    }
    let claims: Vec<_> = (listed.workers.iter())
        .flat_map(|w| w.claims.iter().map(move |c| (w, c)))
        .collect();
    html.push_str("<h2>Live claims</h2>\n");
    if claims.is_empty() {
        html.push_str("<p class=\"muted\" id=\"no-claims\">No live claim.</p>\n");
    } else {
        html.push_str(
            "<table id=\"claims\"><thead><tr><th>Task</th><th>Type</th><th>Worker</th>\
             <th>Attempt</th><th>Claimed</th><th>Expires</th><th>Last heartbeat</th></tr></thead><tbody>\n",
        );
        for (w, c) in claims {
            let _ = writeln!(
                html,
                "<tr class=\"claim\"><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td>\
                 <td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(&c.task),
                escape(&c.task_type),
                escape(&w.worker),
                c.attempt,
                escape(&c.claimed_at),
                escape(&c.expires_at),
                or_dash(c.last_heartbeat.as_deref()),
            );
        }
        html.push_str("</tbody></table>\n");
    }
    html.push_str("<h2>Waiting for a worker</h2>\n");
    if listed.waiting.is_empty() {
        html.push_str("<p class=\"muted\" id=\"none-waiting\">No task waits for a worker.</p>\n");
    } else {
        html.push_str(
            "<table id=\"waiting\"><thead><tr><th>Type</th><th>Tasks</th></tr></thead><tbody>\n",
        );
        for (task_type, n) in &listed.waiting {
            let _ = writeln!(html, "<tr><td>{}</td><td>{n}</td></tr>", escape(task_type));
        }
        html.push_str("</tbody></table>\n");
    }
    page.render(StatusCode::OK, Section::Workers, TITLE, "", &html)
}
