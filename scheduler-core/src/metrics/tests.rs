//! Unit tests of `metrics.rs`.

use super::*;

#[test]
fn encodes_counters_histograms_and_gauges_with_their_labels() {
    let metrics = Metrics::new();
    metrics.persisted(3, 10, Duration::from_millis(4));
    metrics.executed(3, ExecutionOutcome::Completed);
    metrics.executed(3, ExecutionOutcome::Completed);
    metrics.attempt(3, Duration::from_millis(2), Some(Duration::from_millis(7)));
    let key = TaskKey {
        scheduled_time: chrono::DateTime::UNIX_EPOCH,
        ordering_id: "o".into(),
        uniqueness_key: "u".into(),
    };
    metrics.retry_scheduled(3, &key, 1, "boom", Duration::from_secs(1));
    let record = Parked::Record {
        topic: "t",
        offset: 7,
    };
    metrics.parked(1, record, ParkReason::Invalid("json"), &"not JSON");
    metrics.rebalanced(RebalanceKind::Assigned, &[3]);
    metrics.seek_back_failed(2, 40, 1, &"Local: Erroneous state");
    metrics.seek_back_failed(2, 40, 2, &"Local: Erroneous state");
    let gauges = InFlightGauges::default();
    let gauge = gauges.start(3);
    let _held = gauge.reserve(5);
    gauge.set_held(2);
    let text = metrics.encode(&gauges);
    for expected in [
        "scheduler_tasks_persisted_total{partition=\"3\"} 10",
        "scheduler_executions_total{partition=\"3\",outcome=\"completed\"} 2",
        "scheduler_persist_duration_seconds_count{partition=\"3\"} 1",
        "scheduler_execution_delay_seconds_count{partition=\"3\"} 1",
        "scheduler_retries_total{partition=\"3\"} 1",
        "scheduler_parked_records_total{partition=\"1\",reason=\"json\"} 1",
        "scheduler_rebalances_total{kind=\"assigned\"} 1",
        "scheduler_seek_back_failures_total{partition=\"2\"} 2",
        "scheduler_tasks_in_memory{partition=\"3\",stage=\"scheduled\"} 2",
        "scheduler_tasks_in_memory{partition=\"3\",stage=\"executing\"} 3",
    ] {
        assert!(text.contains(expected), "missing {expected} in:\n{text}");
    }
}

#[test]
fn statement_counts_are_read_from_the_store_when_scraped() {
    let metrics = Metrics::new();
    let counts = std::sync::Arc::new(std::sync::Mutex::new(vec![("task insert", 5u64)]));
    let source = std::sync::Arc::clone(&counts);
    metrics.count_statements_from(Box::new(move || {
        let statements = source.lock().map(|c| c.clone()).unwrap_or_default();
        // Rows: ten per statement.
        let rows = statements.iter().map(|(op, n)| (*op, n * 10)).collect();
        crate::metrics::CqlCounts { statements, rows }
    }));
    let gauges = InFlightGauges::default();
    assert!(metrics
        .encode(&gauges)
        .contains("scheduler_cql_statements_total{operation=\"task insert\"} 5"));
    *counts.lock().expect("lock") = vec![("task insert", 12), ("status read", 3)];
    let text = metrics.encode(&gauges);
    assert!(
        text.contains("scheduler_cql_statements_total{operation=\"task insert\"} 12"),
        "{text}"
    );
    assert!(
        text.contains("scheduler_cql_statements_total{operation=\"status read\"} 3"),
        "{text}"
    );
    assert!(
        text.contains("scheduler_cql_rows_total{operation=\"task insert\"} 120"),
        "{text}"
    );
}
