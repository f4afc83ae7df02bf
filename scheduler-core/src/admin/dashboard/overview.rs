//! `GET /dashboard`: the queue as this node sees it. Its figures are the status API's answer
//! (`GET /api/v1/status`, the same handler called), the stale and suspended tasks of the
//! node's `/metrics` (the same text), the dead letters' count (`GET /api/v1/dead-letters`) and
//! every partition's owner (`GET /api/v1/partitions`, the store's ownership table: the whole
//! cluster); the charts are the queue's [`History`](super::history::History).

use std::fmt::Write;
use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use axum::Json;
use serde::Deserialize;

use super::dead_letters::count_dead_letters;
use super::history::{Histories, Sample, KEPT, PERIOD};
use super::html::{escape, or_dash, Page, Section};
use super::metrics_text::{parse, per_partition};
use super::svg::{line_chart, number, Series};
use crate::admin::api::{PartitionOwnerView, StatusResponse};
use crate::admin::state::AdminState;

/// The overview's query: `refresh=N` reloads the page every N seconds.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct OverviewQuery {
    refresh: Option<u32>,
}

/// `GET /dashboard[?refresh=N]`
pub(crate) async fn page(
    State(state): State<Arc<AdminState>>,
    page: Page,
    histories: Option<Extension<Histories>>,
    query: Result<Query<OverviewQuery>, QueryRejection>,
) -> Response {
    let histories = histories.map(|Extension(h)| h);
    let title = "Overview";
    let refresh = match query {
        Ok(Query(OverviewQuery { refresh: None })) => None,
        Ok(Query(OverviewQuery {
            refresh: Some(n @ 2..=3600),
        })) => Some(n),
        _ => {
            let message = "refresh must be a number of seconds, 2 to 3600";
            return page.error(StatusCode::BAD_REQUEST, Section::Overview, title, message);
        }
    };
    let Json(status) = crate::admin::status(State(Arc::clone(&state))).await;
    let metrics = parse(&state.node_metrics.encode());
    let figures = Figures {
        stale: per_partition(&metrics, "scheduler_stale_tasks", &state.queue),
        suspended: per_partition(&metrics, "scheduler_suspended_tasks", &state.queue),
        dead_letters: count_dead_letters(&state).await.map_err(|e| e.message),
        owners: crate::admin::partitions::list(State(Arc::clone(&state)))
            .await
            .map(|Json(answer)| answer.partitions)
            .map_err(|e| e.message),
    };
    let history = histories.as_ref().and_then(|h| h.of(&state.queue));
    let samples: Vec<(f64, Sample)> = history.map_or_else(Vec::new, |history| {
        let now = history.now();
        (history.samples().into_iter())
            .map(|s| ((s.at - now).as_seconds_f64(), s))
            .collect()
    });
    let body = render(&page, &status, &figures, &samples);
    let head = refresh.map_or_else(String::new, |n| {
        format!("<meta http-equiv=\"refresh\" content=\"{n}\">")
    });
    page.render(StatusCode::OK, Section::Overview, title, &head, &body)
}

/// What the overview shows beside the status answer.
pub(crate) struct Figures {
    /// Stale tasks per partition (`scheduler_stale_tasks`).
    pub(crate) stale: std::collections::BTreeMap<i32, i64>,
    /// Tasks held by a suspension per partition (`scheduler_suspended_tasks`).
    pub(crate) suspended: std::collections::BTreeMap<i32, i64>,
    /// The dead letters not redriven: how many, and whether there are more than counted.
    pub(crate) dead_letters: Result<(usize, bool), String>,
    /// Every partition's owner, or why it could not be read.
    pub(crate) owners: Result<Vec<PartitionOwnerView>, String>,
}

/// The overview's body. `samples` are the history's, each with its seconds before now.
pub(crate) fn render(
    page: &Page,
    status: &StatusResponse,
    figures: &Figures,
    samples: &[(f64, Sample)],
) -> String {
    let mut html = String::new();
    let scheduled: usize = status.partitions.iter().map(|p| p.tasks_scheduled).sum();
    let due: usize = status.partitions.iter().map(|p| p.tasks_executing).sum();
    let lags: Vec<i64> = status
        .partitions
        .iter()
        .filter_map(|p| p.kafka_lag)
        .collect();
    let lag = (!lags.is_empty()).then(|| lags.iter().sum::<i64>().to_string());
    let stale: i64 = (status.owned_partitions.iter())
        .filter_map(|p| figures.stale.get(p))
        .sum();
    let waiting: i64 = status.waiting_for_handler.values().sum();
    let dead = match &figures.dead_letters {
        Ok((n, more)) => format!("{n}{}", if *more { "+" } else { "" }),
        Err(_) => "?".to_string(),
    };
    let card = |html: &mut String, label: &str, id: &str, value: &str, sub: &str| {
        let _ = write!(
            html,
            "<div class=\"card\"><div class=\"label\">{label}</div>\
             <div class=\"value\" id=\"{id}\">{value}</div><div class=\"sub\">{sub}</div></div>"
        );
    };
    html.push_str("<section class=\"cards\">");
    let of = format!(
        "of <span id=\"partition-count\">{}</span> partitions",
        status.partition_count
    );
    let owned = status.owned_partitions.len().to_string();
    card(&mut html, "Partitions owned", "owned-count", &owned, &of);
    let memory = (scheduled + due).to_string();
    let split = format!("{scheduled} waiting for their time, {due} due");
    card(
        &mut html,
        "Tasks in memory",
        "in-memory-total",
        &memory,
        &split,
    );
    let due_text = due.to_string();
    card(
        &mut html,
        "Backlog: due now",
        "due-total",
        &due_text,
        "queued or running",
    );
    let lag_text = or_dash(lag.as_deref());
    card(
        &mut html,
        "Kafka lag",
        "lag-total",
        &lag_text,
        "records not yet consumed",
    );
    let stale_text = stale.to_string();
    card(
        &mut html,
        "Stale tasks",
        "stale-total",
        &stale_text,
        "overdue past stale_after",
    );
    let dead_link = format!(
        "<a href=\"{}\">not redriven</a>",
        escape(&page.url("/dead-letters"))
    );
    card(
        &mut html,
        "Dead letters",
        "dead-letter-count",
        &dead,
        &dead_link,
    );
    let waiting_text = waiting.to_string();
    card(
        &mut html,
        "Waiting for a handler",
        "waiting-total",
        &waiting_text,
        "due, no handler here",
    );
    html.push_str("</section>\n");
    if let Err(e) = &figures.dead_letters {
        let _ = writeln!(html, "<p class=\"error\">Dead letters: {}</p>", escape(e));
    }
    charts(&mut html, samples);
    cluster(&mut html, status, figures);
    html
}

fn charts(html: &mut String, samples: &[(f64, Sample)]) {
    // The last 15 minutes, or less while the node has run less (whole minutes, one at least),
    // so that a young node's few samples are not squeezed against the right edge.
    let kept = (KEPT as u64 * PERIOD.as_secs()) as f64;
    let span = samples.first().map_or(0.0, |(t, _)| -t);
    let window = ((span / 60.0).ceil() * 60.0).clamp(60.0, kept);
    let series = |name: &str, value: &dyn Fn(&Sample) -> Option<f64>| Series {
        name: name.to_string(),
        points: samples.iter().map(|(t, s)| (*t, value(s))).collect(),
    };
    let ms = |v: Option<f64>| v.map(|s| s * 1000.0);
    let throughput = [
        series("completed per second", &|s| Some(s.completed_per_second())),
        series("failed or dropped per second", &|s| {
            Some(s.failed_per_second())
        }),
    ];
    let lateness = [series("p50", &|s| ms(s.p50)), series("p99", &|s| ms(s.p99))];
    let last = samples.last().map(|(_, s)| s);
    let throughput_now = last.map_or_else(
        || "No sample yet: the first comes 5 s after the node starts.".to_string(),
        |s| {
            format!(
                "Last {} s: <span id=\"completed-rate\">{}</span> completed/s, \
                 <span id=\"failed-rate\">{}</span> failed/s.",
                number(s.seconds),
                number(s.completed_per_second()),
                number(s.failed_per_second())
            )
        },
    );
    let lateness_now = last.map_or_else(String::new, |s| match (s.p50, s.p99) {
        (Some(p50), Some(p99)) => format!(
            "Last {} s: {} tasks started, p50 {} ms, p99 {} ms.",
            number(s.seconds),
            s.started,
            number(p50 * 1000.0),
            number(p99 * 1000.0)
        ),
        _ => format!("Last {} s: no task started.", number(s.seconds)),
    });
    let _ = writeln!(
        html,
        "<section class=\"charts\"><div class=\"chart-box\"><h2>Throughput</h2>{}\
         <p class=\"caption\">{throughput_now}</p></div>\
         <div class=\"chart-box\"><h2>Lateness</h2>{}<p class=\"caption\">{lateness_now} \
         A task's first start after its time (the execution-delay histogram, estimated \
         within its doubling buckets).</p></div></section>",
        line_chart(
            "throughput-chart",
            "Tasks finished per second",
            "/s",
            window,
            &throughput
        ),
        line_chart(
            "lateness-chart",
            "Lateness of started tasks",
            "ms",
            window,
            &lateness
        ),
    );
}

fn cluster(html: &mut String, status: &StatusResponse, figures: &Figures) {
    let group = (status.queues.iter())
        .find(|q| q.name == status.queue)
        .map(|q| q.group_id.clone())
        .unwrap_or_default();
    let owned = status.owned_partitions.len();
    let _ = writeln!(
        html,
        "<section><h2>Cluster</h2><p>This node, <code>{}</code> (version {}), owns {owned} of \
         the {} partitions of <code>{}</code>{}. The owners are the nodes that claimed each \
         partition last (the store's ownership table); a partition of another node shows its \
         figures on that node's dashboard.</p>",
        escape(&status.node_id),
        escape(&status.version),
        status.partition_count,
        escape(&status.topic),
        if group.is_empty() {
            String::new()
        } else {
            format!(" in consumer group <code>{}</code>", escape(&group))
        },
    );
    let owners = match &figures.owners {
        Ok(owners) => {
            nodes(html, status, owners);
            owners.as_slice()
        }
        Err(e) => {
            let _ = writeln!(html, "<p class=\"error\">Owners: {}</p>", escape(e));
            &[]
        }
    };
    html.push_str(
        "<table id=\"partitions\"><thead><tr><th>Partition</th><th>Owner</th><th>Claimed</th>\
         <th>In memory, waiting</th><th>Due: queued or running</th><th>Kafka lag</th>\
         <th>Stale</th><th>Held by a suspension</th></tr></thead><tbody>\n",
    );
    for partition in 0..status.partition_count as i32 {
        let claim = owners.iter().find(|o| o.partition == partition);
        let owner = claim.and_then(|c| c.owner.as_deref());
        let claimed = claim.and_then(|c| c.claimed_at.as_deref()).map_or_else(
            || or_dash(None),
            |at| {
                format!(
                    "<span title=\"epoch {}\">{}</span>",
                    claim.map_or(0, |c| c.epoch),
                    escape(at)
                )
            },
        );
        let cells = format!(
            "<td>{partition}</td><td data-field=\"owner\">{}</td>\
             <td data-field=\"claimedAt\">{claimed}</td>",
            or_dash(owner),
        );
        let Some(p) = status.partitions.iter().find(|p| p.partition == partition) else {
            let _ = writeln!(
                html,
                "<tr data-partition=\"{partition}\" class=\"elsewhere\">{cells}\
                 <td colspan=\"5\" class=\"muted\">not run by this node</td></tr>"
            );
            continue;
        };
        let gauge =
            |m: &std::collections::BTreeMap<i32, i64>| m.get(&partition).copied().unwrap_or(0);
        let lag = p.kafka_lag.map(|l| l.to_string());
        let _ = writeln!(
            html,
            "<tr data-partition=\"{partition}\" class=\"owned\">{cells}\
             <td data-field=\"tasksScheduled\">{}</td><td data-field=\"tasksExecuting\">{}</td>\
             <td data-field=\"kafkaLag\">{}</td><td data-field=\"staleTasks\">{}</td>\
             <td data-field=\"suspendedTasks\">{}</td></tr>",
            p.tasks_scheduled,
            p.tasks_executing,
            or_dash(lag.as_deref()),
            gauge(&figures.stale),
            gauge(&figures.suspended),
        );
    }
    html.push_str("</tbody></table>\n");
    let handlers = if status.handlers.is_empty() {
        "none by name".to_string()
    } else {
        (status.handlers.iter())
            .map(|h| format!("<code>{}</code>", escape(h)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(
        html,
        "<p>Handlers on this node: {handlers}{}.</p>",
        if status.handles_every_type {
            ", and one for every other type"
        } else {
            ""
        }
    );
    if !status.waiting_for_handler.is_empty() {
        html.push_str(
            "<table id=\"waiting\"><thead><tr><th>Task type</th><th>Due tasks waiting for a \
             node with its handler</th></tr></thead><tbody>",
        );
        for (task_type, n) in &status.waiting_for_handler {
            let _ = write!(html, "<tr><td>{}</td><td>{n}</td></tr>", escape(task_type));
        }
        html.push_str("</tbody></table>\n");
    }
    html.push_str("</section>\n");
}

/// The nodes that own partitions, each with its partitions.
fn nodes(html: &mut String, status: &StatusResponse, owners: &[PartitionOwnerView]) {
    let mut nodes: std::collections::BTreeMap<&str, Vec<i32>> = Default::default();
    let mut unclaimed = Vec::new();
    for o in owners {
        match &o.owner {
            Some(node) => nodes.entry(node).or_default().push(o.partition),
            None => unclaimed.push(o.partition),
        }
    }
    html.push_str(
        "<table id=\"nodes\"><thead><tr><th>Node</th><th>Partitions</th><th>Which</th></tr>\
         </thead><tbody>\n",
    );
    let list = |partitions: &[i32]| {
        (partitions.iter())
            .map(i32::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    for (node, partitions) in &nodes {
        let here = if *node == status.node_id {
            " <span class=\"muted\">(this node)</span>"
        } else {
            ""
        };
        let _ = writeln!(
            html,
            "<tr data-node=\"{}\"><td><code>{}</code>{here}</td>\
             <td data-field=\"partitionCount\">{}</td><td>{}</td></tr>",
            escape(node),
            escape(node),
            partitions.len(),
            list(partitions),
        );
    }
    if !unclaimed.is_empty() {
        let _ = writeln!(
            html,
            "<tr data-node=\"\"><td class=\"muted\">never claimed</td><td>{}</td><td>{}</td></tr>",
            unclaimed.len(),
            list(&unclaimed),
        );
    }
    html.push_str("</tbody></table>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::api::PartitionStatus;
    use chrono::{TimeZone, Utc};

    fn owner(partition: i32, node: Option<&str>, owned_here: bool) -> PartitionOwnerView {
        PartitionOwnerView {
            partition,
            owner: node.map(str::to_string),
            epoch: 3,
            claimed_at: Some("2026-11-24T06:00:00.000Z".into()),
            owned_here,
        }
    }

    #[test]
    fn the_overview_shows_the_status_answers_figures_partition_by_partition() {
        let status = StatusResponse {
            node_id: "node-<1>".into(),
            version: "0.1.0".into(),
            topic: "tasks".into(),
            partition_count: 3,
            owned_partitions: vec![0, 2],
            partitions: vec![
                PartitionStatus {
                    partition: 0,
                    tasks_scheduled: 7,
                    tasks_executing: 2,
                    kafka_lag: Some(11),
                },
                PartitionStatus {
                    partition: 2,
                    tasks_scheduled: 1,
                    tasks_executing: 0,
                    kafka_lag: None,
                },
            ],
            handlers: vec!["email".into()],
            handles_every_type: false,
            waiting_for_handler: Default::default(),
            queue: "default".into(),
            queues: vec![],
        };
        let figures = Figures {
            stale: [(0, 4), (2, 1)].into(),
            suspended: [(2, 3)].into(),
            dead_letters: Ok((1000, true)),
            owners: Ok(vec![
                owner(0, Some("node-<1>"), true),
                owner(1, Some("node-2"), false),
                owner(2, Some("node-<1>"), true),
            ]),
        };
        let at = Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).single().unwrap();
        let sample = Sample {
            at,
            seconds: 5.0,
            completed: 10,
            failed: 1,
            started: 10,
            p50: Some(0.002),
            p99: Some(0.04),
        };
        let html = render(&Page::plain(), &status, &figures, &[(-5.0, sample)]);
        for expected in [
            "id=\"owned-count\">2<",
            "id=\"partition-count\">3<",
            "id=\"in-memory-total\">10<",
            "id=\"due-total\">2<",
            "id=\"lag-total\">11<",
            "id=\"stale-total\">5<",
            "id=\"dead-letter-count\">1000+<",
            "<td data-field=\"tasksScheduled\">7</td><td data-field=\"tasksExecuting\">2</td>",
            "<td data-field=\"kafkaLag\"><span class=\"none\">—</span></td><td data-field=\"staleTasks\">1</td>\
             <td data-field=\"suspendedTasks\">3</td>",
            "<tr data-partition=\"1\" class=\"elsewhere\"><td>1</td>\
             <td data-field=\"owner\">node-2</td>",
            "<td data-field=\"owner\">node-&lt;1&gt;</td>",
            "title=\"epoch 3\">2026-11-24T06:00:00.000Z<",
            "<tr data-node=\"node-&lt;1&gt;\"><td><code>node-&lt;1&gt;</code> \
             <span class=\"muted\">(this node)</span></td>\
             <td data-field=\"partitionCount\">2</td><td>0, 2</td></tr>",
            "<tr data-node=\"node-2\"><td><code>node-2</code></td>\
             <td data-field=\"partitionCount\">1</td><td>1</td></tr>",
            "<span id=\"completed-rate\">2</span> completed/s",
            "p50 2 ms, p99 40 ms",
        ] {
            assert!(html.contains(expected), "{expected} missing from {html}");
        }
        assert!(!html.contains("node-<1>"), "escaped");
    }
}
