//! The admin router on the in-memory store, for the API's unit tests.

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use prometheus_client::registry::Registry;
use scheduler_client::{Scheduler, SchedulerConfig};
use tower::ServiceExt;

use super::{router, AdminState};
use crate::clock::SystemClock;
use crate::enqueue::Outbox;
use crate::in_flight::InFlightGauges;
use crate::metrics::{Metrics, NodeMetrics};
use crate::recurring::RecurringSchedules;
use crate::store::memory::MemoryStore;

/// A node's API on the in-memory store, with a producer that never connects.
pub(super) fn app() -> axum::Router {
    router(vec![Arc::new(state(Arc::new(MemoryStore::new())))])
}

/// A node's admin state on `store`: one queue of 4 partitions, none owned, no token, a
/// producer that never connects.
pub(super) fn state(store: Arc<MemoryStore>) -> AdminState {
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::for_queue(&mut registry, None));
    let in_flight = InFlightGauges::default();
    let node_metrics = Arc::new(NodeMetrics::new(
        registry,
        vec![(Arc::clone(&metrics), in_flight.clone())],
    ));
    let canceller = Scheduler::new(SchedulerConfig::new("127.0.0.1:1", "openapi-test"))
        .expect("a producer is created without connecting");
    AdminState {
        node_id: "n".into(),
        queue: "default".into(),
        queues: Vec::new(),
        topic: "openapi-test".into(),
        partition_count: 4,
        owned: Arc::new(Mutex::new(Vec::new())),
        metrics,
        node_metrics,
        in_flight,
        lag: Default::default(),
        store: store.clone(),
        canceller: Arc::new(canceller),
        schedules: RecurringSchedules::new(
            store,
            Arc::new(Outbox::default()),
            Arc::new(SystemClock),
        ),
        handlers: Vec::new(),
        handles_every_type: true,
        token: None,
        scheduling_grace_window: std::time::Duration::from_secs(10),
        max_task_bytes: 512 * 1024,
        limits: None,
        workers: None,
        retrying: None,
    }
}

/// Status and body of `method path`, with `body` as JSON when given.
pub(super) async fn call(
    app: &axum::Router,
    method: Method,
    body: Option<&str>,
    path: &str,
) -> (StatusCode, String) {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .expect("a valid request");
    let response = app.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .expect("a body");
    (status, String::from_utf8_lossy(&bytes).into_owned())
}
