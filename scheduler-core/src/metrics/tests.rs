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
        "scheduler_tasks_in_memory{partition=\"3\",stage=\"scheduled\"} 2",
        "scheduler_tasks_in_memory{partition=\"3\",stage=\"executing\"} 3",
    ] {
        assert!(text.contains(expected), "missing {expected} in:\n{text}");
    }
}
