//! The engine end to end on one node against the real stack: schedule_task → Kafka → the
//! node's actor tree → Cassandra → the executor. (Over 400 lines: independent tests, one per
//! behaviour, sharing only the harness in `it-tests/src/engine.rs`.)

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{TimeDelta, Utc};
use it_tests::engine::{
    by_task, executions, metric_sum, task, wait_until, Execution, Recorder, TestEnv,
};
use rdkafka::config::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use scheduler_client::{partition_for, wire, ScheduleError};
use scheduler_core::settings::SchedulingSettings;
use scheduler_core::store::{StatusStore, TaskStatus};
use scheduler_core::{SchedulerNode, TaskError};

/// Most lateness a due task may show (start − scheduled time).
const MAX_LATENESS: TimeDelta = TimeDelta::milliseconds(1000);
/// Most time a task due when enqueued may take to start: Kafka transit, persistence, dispatch.
const AT_ONCE: TimeDelta = TimeDelta::milliseconds(2000);

async fn start_node(
    env: &TestEnv,
    scheduling: SchedulingSettings,
    recorder: Recorder,
) -> SchedulerNode {
    env.start_sole_node(env.settings(scheduling), recorder)
        .await
}

fn assert_on_time(e: &Execution) {
    let lateness = e.started - e.key.scheduled_time;
    assert!(
        lateness >= TimeDelta::zero(),
        "{} ran {lateness} early",
        e.key
    );
    assert!(lateness < MAX_LATENESS, "{} ran {lateness} late", e.key);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_run_at_their_time_in_any_enqueue_order_once_and_within_the_grace_window() {
    let env = TestEnv::new("it_timing", 4).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let node = start_node(
        &env,
        TestEnv::quick_scheduling(),
        Recorder::new("n1", &log, Duration::ZERO),
    )
    .await;
    let scheduler = env.scheduler(Duration::from_secs(20));
    let now = Utc::now();
    let at = |ms: i64| now + TimeDelta::milliseconds(ms);

    // 1. Due now, and due in about 10 s.
    let due_now = task("now", at(0), "1");
    let ten = task("ten", at(10_000), "1");
    let ten_and_a_half = task("ten", at(10_500), "2");
    // 4. The later task enqueued first, for different and for the same orderingId.
    let late_other = task("rev-a", at(12_000), "late");
    let early_other = task("rev-b", at(11_000), "early");
    let late_same = task("rev-same", at(12_000), "late");
    let early_same = task("rev-same", at(11_000), "early");
    // 5. The same task scheduled twice.
    let twice = task("dup", at(5_000), "1");
    // 6. With a 20 s grace window: 10 s in the past is accepted, 30 s is refused.
    let past_ok = task("past", at(-10_000), "ok");
    let past_refused = task("past", at(-30_000), "refused");
    // 7. A task for an orderingId, then (after it ran) one slightly in the past.
    let first_of_pair = task("after", at(2_000), "first");

    for t in [
        &due_now,
        &ten_and_a_half,
        &ten,
        &late_other,
        &early_other,
        &late_same,
        &early_same,
        &twice,
        &twice,
        &past_ok,
        &first_of_pair,
    ] {
        scheduler
            .schedule_task((*t).clone())
            .await
            .expect("scheduled");
    }
    let refused = scheduler.schedule_task(past_refused.clone()).await;
    assert!(
        matches!(refused, Err(ScheduleError::TooFarInThePast { .. })),
        "a task 30 s in the past is refused: {refused:?}"
    );
    assert!(refused
        .unwrap_err()
        .to_string()
        .contains("beyond the 20000 ms grace window"));

    wait_until(
        Duration::from_secs(10),
        "the first task of `after` to run",
        || by_task(&log).contains_key(&first_of_pair.key()),
    )
    .await;
    let slightly_past = task("after", Utc::now() - TimeDelta::seconds(3), "second");
    scheduler
        .schedule_task(slightly_past.clone())
        .await
        .expect("scheduled");

    let expected = [
        &due_now,
        &ten,
        &ten_and_a_half,
        &late_other,
        &early_other,
        &late_same,
        &early_same,
        &twice,
        &past_ok,
        &first_of_pair,
        &slightly_past,
    ];
    wait_until(
        Duration::from_secs(30),
        "every accepted task to run",
        || {
            let runs = by_task(&log);
            expected.iter().all(|t| runs.contains_key(&t.key()))
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let runs = by_task(&log);
    for t in expected {
        assert_eq!(runs[&t.key()].len(), 1, "{} ran once", t.key());
    }
    assert!(!runs.contains_key(&past_refused.key()));
    // Due now: runs at once, Kafka transit included.
    let now_run = &runs[&due_now.key()][0];
    let transit = now_run.started - due_now.scheduled_time;
    println!(
        "due-now task started {} ms after its time",
        transit.num_milliseconds()
    );
    assert!(
        transit >= TimeDelta::zero() && transit < AT_ONCE,
        "the task due now ran {transit} after its time"
    );
    // Due later: dispatched by timer at their time.
    for t in [
        &ten,
        &ten_and_a_half,
        &late_other,
        &early_other,
        &late_same,
        &early_same,
        &twice,
    ] {
        assert_on_time(&runs[&t.key()][0]);
    }
    // Tasks already due when enqueued run at once.
    for t in [&past_ok, &slightly_past] {
        let e = &runs[&t.key()][0];
        assert!(
            e.started - e.key.scheduled_time < TimeDelta::seconds(15),
            "{} ran late",
            t.key()
        );
    }
    let same: Vec<String> = executions(&log)
        .into_iter()
        .filter(|e| e.key.ordering_id == "rev-same")
        .map(|e| e.key.uniqueness_key)
        .collect();
    assert_eq!(same, ["early", "late"], "each at its own time");

    let metrics = node.metrics();
    let completed = metric_sum(
        &metrics,
        "scheduler_executions_total",
        &[("outcome", "completed")],
    );
    assert_eq!(
        completed,
        expected.len() as f64,
        "one completed execution per task:\n{metrics}"
    );
    // The duplicate was persisted twice, or once when its two records shared a poll batch (of
    // several records of one key in a batch only the last is written); the refused task never
    // reached the topic.
    let persisted = metric_sum(&metrics, "scheduler_tasks_persisted_total", &[]);
    let once_or_twice = [expected.len() as f64, expected.len() as f64 + 1.0];
    assert!(once_or_twice.contains(&persisted), "{metrics}");
    let delays = metric_sum(&metrics, "scheduler_execution_delay_seconds_count", &[]);
    assert_eq!(delays, expected.len() as f64);
    assert_eq!(
        metric_sum(
            &metrics,
            "scheduler_rebalances_total",
            &[("kind", "assigned")]
        ),
        1.0
    );
    // The producer's own metrics: 12 accepted (the duplicate twice), one refused.
    let client = scheduler.metrics();
    let requests = |result| {
        metric_sum(
            &client,
            "scheduler_client_requests_total",
            &[("operation", "schedule"), ("result", result)],
        )
    };
    assert_eq!(
        (
            requests("success"),
            requests("rejected"),
            requests("failed")
        ),
        (12.0, 1.0, 0.0),
        "{client}"
    );
    assert_eq!(
        metric_sum(
            &client,
            "scheduler_client_request_duration_seconds_count",
            &[]
        ),
        12.0
    );
    node.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_beyond_a_short_look_ahead_still_runs_on_time() {
    let env = TestEnv::new("it_lookahead", 2).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let scheduling = SchedulingSettings {
        max_look_ahead: Duration::from_secs(15),
        ..TestEnv::quick_scheduling()
    };
    let node = start_node(&env, scheduling, Recorder::new("n1", &log, Duration::ZERO)).await;
    let far = task("far", Utc::now() + TimeDelta::seconds(20), "1");
    env.scheduler(Duration::from_secs(10))
        .schedule_task(far.clone())
        .await
        .expect("scheduled");
    wait_until(
        Duration::from_secs(30),
        "the task 20 s ahead to run",
        || !executions(&log).is_empty(),
    )
    .await;
    let runs = executions(&log);
    assert_eq!(runs.len(), 1);
    assert_on_time(&runs[0]);
    node.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_retried_with_backoff_and_recorded_failed_after_the_last_retry() {
    let env = TestEnv::new("it_retry", 2).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let scheduling = SchedulingSettings {
        backoff_factor: Duration::from_secs(1),
        max_backoff: Duration::from_secs(2),
        max_task_retries: 2,
        ..TestEnv::quick_scheduling()
    };
    let recorder =
        Recorder::new("n1", &log, Duration::ZERO).with_behaviour(Arc::new(|task, previous| {
            match task.ordering_id.as_str() {
                "flaky" if previous < 2 => Err(TaskError::retry("not yet")),
                "doomed" => Err(TaskError::retry("always failing")),
                _ => Ok(()),
            }
        }));
    let node = start_node(&env, scheduling, recorder).await;
    let scheduler = env.scheduler(Duration::from_secs(10));
    let flaky = task("flaky", Utc::now(), "1");
    let doomed = task("doomed", Utc::now(), "1");
    scheduler
        .schedule_task(flaky.clone())
        .await
        .expect("scheduled");
    scheduler
        .schedule_task(doomed.clone())
        .await
        .expect("scheduled");

    wait_until(Duration::from_secs(10), "the node to be ready", || {
        node.is_ready()
    })
    .await;
    for t in [&flaky, &doomed] {
        wait_until(Duration::from_secs(30), "a final status", || {
            by_task(&log).get(&t.key()).map(Vec::len) == Some(3)
        })
        .await;
    }
    let mut flaky_status = None;
    let mut doomed_status = None;
    for _ in 0..100 {
        // The node's own status reader: no store handle needed.
        flaky_status = node.task_status(&flaky.key()).await.expect("status read");
        doomed_status = node.task_status(&doomed.key()).await.expect("status read");
        if flaky_status.is_some() && doomed_status.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let flaky_status = flaky_status.expect("flaky recorded");
    let doomed_status = doomed_status.expect("doomed recorded");
    assert_eq!(
        (flaky_status.status, flaky_status.attempts),
        (TaskStatus::Completed, 3)
    );
    assert_eq!(
        (doomed_status.status, doomed_status.attempts),
        (TaskStatus::Failed, 3)
    );
    assert_eq!(doomed_status.last_error.as_deref(), Some("always failing"));

    // Backoff: retry n waits between half and all of min(1 s * 2^(n-1), 2 s).
    for t in [&flaky, &doomed] {
        let runs = &by_task(&log)[&t.key()];
        for (n, pair) in runs.windows(2).enumerate() {
            let gap = (pair[1].started - pair[0].finished).num_milliseconds();
            let period = [1000, 2000][n];
            assert!(
                gap >= period / 2 - 20 && gap <= period + 500,
                "{} retry {} came {gap} ms after the failure (period {period} ms)",
                t.key(),
                n + 1
            );
        }
    }

    let metrics = node.metrics();
    assert_eq!(
        metric_sum(&metrics, "scheduler_retries_total", &[]),
        4.0,
        "{metrics}"
    );
    assert_eq!(
        metric_sum(&metrics, "scheduler_retries_exhausted_total", &[]),
        1.0
    );
    assert_eq!(
        metric_sum(
            &metrics,
            "scheduler_executions_total",
            &[("outcome", "failed")]
        ),
        1.0
    );
    assert_eq!(
        metric_sum(
            &metrics,
            "scheduler_executions_total",
            &[("outcome", "completed")]
        ),
        1.0
    );
    assert_eq!(
        metric_sum(&metrics, "scheduler_execution_duration_seconds_count", &[]),
        6.0
    );

    // Recorded as failed: scheduling it again does not run it again.
    scheduler
        .schedule_task(doomed.clone())
        .await
        .expect("scheduled again");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(by_task(&log)[&doomed.key()].len(), 3);
    node.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_tasks_of_one_ordering_id_run_in_order_one_at_a_time_ties_in_enqueue_order() {
    let env = TestEnv::new("it_order", 4).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let node = start_node(
        &env,
        TestEnv::quick_scheduling(),
        Recorder::new("n1", &log, Duration::from_millis(5)),
    )
    .await;
    let scheduler = env.scheduler(Duration::from_secs(10));
    let start = Utc::now() + TimeDelta::seconds(2);
    // Four at each time, their uniqueness keys in the reverse of enqueue order: ties run in
    // enqueue order.
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            task(
                "serial",
                start + TimeDelta::milliseconds(i / 4 * 5),
                &format!("{:03}", 199 - i),
            )
        })
        .collect();
    for t in &tasks {
        scheduler.schedule_task(t.clone()).await.expect("scheduled");
    }
    wait_until(Duration::from_secs(60), "200 executions", || {
        executions(&log).len() >= 200
    })
    .await;
    let runs = executions(&log);
    let order: Vec<_> = runs.iter().map(|e| e.key.clone()).collect();
    let expected: Vec<_> = tasks.iter().map(|t| t.key()).collect();
    assert_eq!(order, expected, "schedule order, ties in enqueue order");
    for pair in runs.windows(2) {
        assert!(
            pair[1].started >= pair[0].finished,
            "{} started before {} finished",
            pair[1].key,
            pair[0].key
        );
    }
    node.shutdown().await.expect("clean shutdown");
}

/// Captures the node's log lines so the test can read what it said about parked records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_the_topic_is_parked_and_valid_tasks_behind_it_still_run() {
    let logs = it_tests::logs::captured();
    let env = TestEnv::new("it_garbage", 4).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let node = start_node(
        &env,
        TestEnv::quick_scheduling(),
        Recorder::new("n1", &log, Duration::ZERO),
    )
    .await;

    let valid = task("victim", Utc::now(), "behind-garbage");
    let partition = partition_for(&valid.ordering_id, env.partitions);
    let stranger = (0..)
        .map(|i| format!("stranger-{i}"))
        .find(|id| partition_for(id, env.partitions) != partition)
        .expect("an orderingId of another partition");
    let misplaced =
        String::from_utf8(wire::encode(&task(&stranger, Utc::now(), "x"))).expect("utf-8");
    let garbage: Vec<(&str, Vec<u8>)> = vec![
        ("not JSON", b"this is not json".to_vec()),
        ("wrong version", br#"{"version":9,"orderingId":"victim","scheduledTime":"2030-01-01T00:00:00.000Z","uniquenessKey":"u"}"#.to_vec()),
        ("missing fields", br#"{"version":1,"orderingId":"victim"}"#.to_vec()),
        ("wrong partition", misplaced.into_bytes()),
        ("not UTF-8", vec![0xff, 0xfe, 0x00]),
        // Over the node's record limit (`max_task_data_bytes`, 512 KiB).
        ("oversized", vec![b' '; 700 * 1024]),
    ];
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &env.stack.kafka_bootstrap)
        .create()
        .expect("producer");
    let mut offsets = Vec::new();
    for (what, payload) in &garbage {
        let delivery = producer
            .send(
                FutureRecord::to(&env.topic)
                    .key("victim")
                    .partition(partition)
                    .payload(payload),
                Timeout::After(Duration::from_secs(10)),
            )
            .await
            .unwrap_or_else(|(e, _)| panic!("produce {what}: {e}"));
        offsets.push((*what, delivery.offset));
    }
    env.scheduler(Duration::from_secs(10))
        .schedule_task(valid.clone())
        .await
        .expect("scheduled");

    wait_until(
        Duration::from_secs(30),
        "the valid task behind the garbage to run",
        || by_task(&log).contains_key(&valid.key()),
    )
    .await;
    let text = logs.text();
    for (what, offset) in offsets {
        let line = text
            .lines()
            .find(|l| {
                l.contains("parked") && l.contains(&format!("partition={partition} ")) && l.contains(&format!("offset={offset} "))
            })
            .unwrap_or_else(|| panic!("no log line parks the {what} record at partition {partition} offset {offset}:\n{text}"));
        assert!(line.contains(&env.topic), "{line}");
    }
    let metrics = node.metrics();
    let p = partition.to_string();
    for (reason, count) in [
        ("json", 2.0),
        ("version", 1.0),
        ("missing_field", 1.0),
        ("wrong_partition", 1.0),
        ("too_large", 1.0),
    ] {
        let parked = metric_sum(
            &metrics,
            "scheduler_parked_records_total",
            &[("partition", &p), ("reason", reason)],
        );
        assert_eq!(parked, count, "parked {reason} records:\n{metrics}");
    }
    node.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_held_in_memory_is_cancelled_on_its_owner_without_a_rebalance() {
    let env = TestEnv::new("it_cancel", 4).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let node = start_node(
        &env,
        TestEnv::quick_scheduling(),
        Recorder::new("n1", &log, Duration::ZERO),
    )
    .await;
    let scheduler = env.scheduler(Duration::from_secs(10));
    let at = Utc::now() + TimeDelta::seconds(10);
    let doomed = task("cancel-me", at, "doomed");
    let sibling = task("cancel-me", at, "kept");
    let finished = task("done-first", Utc::now(), "1");
    for t in [&doomed, &sibling, &finished] {
        scheduler.schedule_task(t.clone()).await.expect("scheduled");
    }
    wait_until(
        Duration::from_secs(10),
        "the first task to run and the others to be held",
        || {
            let metrics = node.metrics();
            by_task(&log).contains_key(&finished.key())
                && metric_sum(
                    &metrics,
                    "scheduler_tasks_in_memory",
                    &[("stage", "scheduled")],
                ) >= 2.0
        },
    )
    .await;

    scheduler
        .cancel_task(&doomed.key())
        .await
        .expect("cancel enqueued");
    scheduler
        .cancel_task(&finished.key())
        .await
        .expect("cancel enqueued");
    wait_until(
        Duration::from_secs(20),
        "the sibling to run at its time",
        || by_task(&log).contains_key(&sibling.key()),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    let runs = by_task(&log);
    assert!(
        !runs.contains_key(&doomed.key()),
        "the cancelled task never ran"
    );
    let store = env.store().await;
    let p = partition_for(&doomed.ordering_id, env.partitions);
    let status = store
        .status(p, doomed.key())
        .await
        .expect("status read")
        .map(|s| s.status);
    assert_eq!(status, Some(TaskStatus::Cancelled));
    let p = partition_for(&finished.ordering_id, env.partitions);
    let status = store
        .status(p, finished.key())
        .await
        .expect("status read")
        .map(|s| s.status);
    assert_eq!(
        status,
        Some(TaskStatus::Completed),
        "cancelling a finished task changes nothing"
    );

    let metrics = node.metrics();
    assert_eq!(
        metric_sum(&metrics, "scheduler_cancellations_total", &[]),
        1.0,
        "{metrics}"
    );
    assert_eq!(
        metric_sum(
            &metrics,
            "scheduler_rebalances_total",
            &[("kind", "revoked")]
        ),
        0.0
    );
    assert_eq!(
        metric_sum(
            &metrics,
            "scheduler_rebalances_total",
            &[("kind", "assigned")]
        ),
        1.0
    );
    node.shutdown().await.expect("clean shutdown");
}
