//! Tracing across Kafka, end to end against the dev stack: a task produced with a W3C
//! `traceparent` runs on `scheduler node`, whose `[telemetry] otlp_endpoint` points at a
//! collector this test plays; the exported execution span carries a link to the producer's
//! span (its trace and span ids), so the record header crossed Kafka and Cassandra.

mod common;

use std::sync::PoisonError;
use std::time::{Duration, Instant};

use common::{canned_api, kafka_bootstrap, NodeProcess};
use scheduler_client::{Scheduler, SchedulerConfig, Task};

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

#[test]
fn a_tasks_execution_span_links_to_the_span_that_scheduled_it() {
    let (collector, received) = canned_api(|_| (200, String::new()));
    let mut node = NodeProcess::start(
        "traces",
        &[
            ("SCHEDULER__TELEMETRY__OTLP_ENDPOINT", &collector),
            ("SCHEDULER__TELEMETRY__SERVICE_NAME", "trace-export-test"),
        ],
    );
    node.wait_for("partition claimed");

    // The producer's span, as another service's tracing would have it.
    let (trace_id, span_id) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let config = SchedulerConfig::new(kafka_bootstrap(), node.topic.clone());
        let scheduler = Scheduler::new(config).expect("producer");
        let task = Task::new("traced", chrono::Utc::now(), "1", Default::default())
            .with_trace_parent(format!("00-{trace_id}-{span_id}-01"));
        scheduler.schedule_task(task).await.expect("enqueued");
    });

    // OTLP's Span.Link: trace_id (field 1, 16 bytes) then span_id (field 2, 8 bytes).
    let mut link = vec![0x0a, 0x10];
    link.extend(hex(trace_id));
    link.extend([0x12, 0x08]);
    link.extend(hex(span_id));
    let deadline = Instant::now() + Duration::from_secs(60);
    let exported = loop {
        let received = received.lock().unwrap_or_else(PoisonError::into_inner);
        let found = received
            .iter()
            .find(|r| r.raw_body.windows(link.len()).any(|w| w == link))
            .cloned();
        let exports = received.len();
        drop(received);
        if let Some(found) = found {
            break found;
        }
        assert!(
            Instant::now() < deadline,
            "no exported span links to the producer's ({exports} exports); node log:\n{}",
            node.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        exported.line.starts_with("POST /v1/traces "),
        "{}",
        exported.line
    );
    for text in ["trace-export-test", "traced", "messaging.system", "kafka"] {
        assert!(
            exported
                .raw_body
                .windows(text.len())
                .any(|w| w == text.as_bytes()),
            "{text} is not in the export"
        );
    }
    node.terminate();
    let _ = node.child.wait();
    let _ = std::fs::remove_dir_all(node.dir());
}
