//! Cancellations, parked tasks and the stale-task gauge.

use super::*;

#[test]
fn a_cancelled_task_never_runs_and_a_finished_one_keeps_its_status() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.assign().await;
        let cancelled = task("c", t0() + ms(10_000), "1");
        let finished = task("f", t0() + ms(1_000), "1");
        h.enqueue(vec![cancelled.clone(), finished.clone()]).await;
        advance(Duration::from_secs(2)).await;
        // The first is held in memory, waiting for its time; the second already ran.
        h.cancel(vec![cancelled.key(), finished.key()]).await;
        advance(Duration::from_secs(30)).await;
        assert!(
            h.recorder.call_times("c").is_empty(),
            "a cancelled task never runs"
        );
        assert_eq!(
            h.store.status_of(P, &cancelled.key()).map(|s| s.status),
            Some(TaskStatus::Cancelled)
        );
        assert_eq!(
            h.store.status_of(P, &finished.key()).map(|s| s.status),
            Some(TaskStatus::Completed)
        );
        assert!(h.store.scheduled(P).is_empty());
        assert_eq!(
            h.in_flight.get(P).map(|g| g.current()),
            Some(0),
            "dropped from memory"
        );

        // Cancelling is final: scheduling the same key again does not run it.
        h.enqueue(vec![cancelled.clone()]).await;
        advance(Duration::from_secs(30)).await;
        assert!(h.recorder.call_times("c").is_empty());
    });
}

#[test]
fn a_task_cancelled_in_its_own_batch_does_not_run() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.assign().await;
        advance(Duration::from_secs(1)).await;
        let due_now = task("now", t0() + ms(1_000), "1");
        h.process(PolledTasks {
            tasks: vec![due_now.clone()],
            cancels: vec![due_now.key()],
            ..PolledTasks::default()
        })
        .await;
        advance(Duration::from_secs(10)).await;
        assert!(h.recorder.call_times("now").is_empty());
        assert_eq!(
            h.store.status_of(P, &due_now.key()).map(|s| s.status),
            Some(TaskStatus::Cancelled)
        );
    });
}

#[test]
fn overdue_incomplete_tasks_show_in_the_stale_gauge() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            stale_after: Duration::from_secs(10),
            backoff_factor: Duration::from_secs(3600),
            max_backoff: Duration::from_secs(3600),
            ..SchedulingSettings::default()
        };
        let h = Harness::new(
            settings,
            Duration::ZERO,
            &[("stuck", Behaviour::FailAlways)],
        );
        h.assign().await;
        h.enqueue(vec![task("stuck", t0(), "1"), task("fine", t0(), "1")])
            .await;
        advance(Duration::from_secs(45)).await;
        let text = h.metrics.encode(&h.in_flight);
        assert!(
            text.contains("scheduler_stale_tasks{partition=\"0\"} 1"),
            "one task is 45 s overdue (stale after 10 s) and still incomplete:\n{text}"
        );
    });
}

#[test]
fn a_task_cassandra_refuses_is_parked_and_the_partition_goes_on() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.assign().await;
        let poison = task(&"x".repeat(70_000), t0(), "1");
        let fine = task("fine", t0(), "1");
        // `process` asserts that the batch counts as persisted (its offsets are committed).
        h.enqueue(vec![poison, fine.clone()]).await;
        advance(Duration::from_secs(1)).await;
        assert_eq!(h.recorder.call_times("fine"), [t0()]);
        let text = h.metrics.encode(&h.in_flight);
        assert!(
            text.contains(
                "scheduler_parked_records_total{partition=\"0\",reason=\"refused_by_store\"} 1"
            ),
            "{text}"
        );
    });
}

#[test]
fn a_batch_of_5000_cancels_completes_within_the_persist_timeout() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.assign().await;
        let tasks: Vec<Task> = (0..5_000)
            .map(|i| task(&format!("o{}", i % 50), t0() + ms(600_000), &i.to_string()))
            .collect();
        h.enqueue(tasks.clone()).await;
        // Each cancellation is a lightweight transaction of a few ms.
        h.store
            .set_latency("status write if absent", Duration::from_millis(5));
        h.store
            .set_latency("status write", Duration::from_millis(5));
        h.cancel(tasks.iter().map(Task::key).collect()).await;
        advance(Duration::from_secs(700)).await;
        assert!(h.recorder.calls().is_empty(), "every task was cancelled");
    });
}

#[test]
fn a_cancel_applied_while_a_checked_task_waits_for_its_time_stops_the_call() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            dispatch_lead: Duration::from_secs(2),
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::ZERO, &[]);
        h.assign().await;
        let due = task("c", t0() + ms(10_000), "1");
        h.enqueue(vec![due.clone()]).await;
        // Dispatched at 8 s, its status read already found it pending.
        advance(Duration::from_millis(9_000)).await;
        h.cancel(vec![due.key()]).await;
        advance(Duration::from_secs(10)).await;
        assert!(
            h.recorder.call_times("c").is_empty(),
            "cancelled: never called"
        );
        assert_eq!(
            h.store.status_of(P, &due.key()).map(|s| s.status),
            Some(TaskStatus::Cancelled)
        );
    });
}

#[test]
fn a_cancel_applied_while_a_checked_task_waits_for_a_slot_stops_the_call() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            executor_concurrency: 1,
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_secs(5), &[]);
        h.assign().await;
        let waiting = task("c", t0() + ms(2_000), "1");
        h.enqueue(vec![task("a", t0() + ms(1_000), "1"), waiting.clone()])
            .await;
        // `a` holds the only slot until 6 s; `c` is checked and waits for it.
        advance(Duration::from_secs(3)).await;
        h.cancel(vec![waiting.key()]).await;
        advance(Duration::from_secs(20)).await;
        assert_eq!(h.recorder.call_times("a"), [t0() + ms(1_000)]);
        assert!(
            h.recorder.call_times("c").is_empty(),
            "cancelled: never called"
        );
    });
}

#[test]
fn a_cancel_that_could_not_be_recorded_does_not_stop_a_checked_task() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            dispatch_lead: Duration::from_secs(2),
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::ZERO, &[]);
        h.assign().await;
        let due = task("c", t0() + ms(10_000), "1");
        h.enqueue(vec![due.clone()]).await;
        advance(Duration::from_millis(9_000)).await;
        // The cancellation's write fails: the batch is not persisted (the consumer offers it
        // again later); meanwhile the task, touched by it, checks again and runs.
        h.store.fail_op("status write if absent", 1);
        let reply = h
            .offer(PolledTasks {
                tasks: vec![],
                cancels: vec![due.key()],
                ..PolledTasks::default()
            })
            .await;
        assert!(reply.persisted.is_empty());
        advance(Duration::from_secs(10)).await;
        assert_eq!(h.recorder.call_times("c").len(), 1);
    });
}

/// A newer owner of the partition (a node this tree has not learnt about yet) polls a cancel
/// of a task this tree checked, which waits long for a slot: this tree's cancel gate never
/// hears of it, and no status is read again in the slot. The newer tree defers the cancel
/// while this tree lists the orderingId in its lease, so the task is never called after it
/// was recorded cancelled. (Until issue 33 a slot that came over 100 ms late read the status
/// again; the deferral makes that read redundant, and it capped a busy executor.)
#[test]
fn a_cancel_polled_by_a_newer_tree_while_a_checked_task_waits_long_for_a_slot_is_recorded_only_after_its_call(
) {
    run_paused(|| async {
        let settings = SchedulingSettings {
            executor_concurrency: 1,
            ..SchedulingSettings::default()
        };
        // Every call takes 3.5 s.
        let h = Harness::new(settings.clone(), Duration::from_millis(3_500), &[]);
        let other = h.second_node(settings);
        h.assign().await;
        let waiting = task("c", t0() + ms(100), "1");
        h.enqueue(vec![task("a", t0(), "1"), waiting.clone()]).await;
        // `a` holds this tree's only slot until 3.5 s; `c` is checked and waits for it. At
        // 3.1 s, just after this tree's periodic epoch read (it learns of the claim at 4 s),
        // the other node claims the partition and polls a cancel of `c`; `c`'s slot comes at
        // 3.5 s, 3.4 s after its time.
        advance(Duration::from_millis(3_100)).await;
        other.assign().await;
        other.cancel(vec![waiting.key()]).await;
        // The calls of `c` made by the time its cancel was first seen recorded (10 ms steps).
        let mut calls_when_cancelled = None;
        for _ in 0..3_000 {
            advance(Duration::from_millis(10)).await;
            let cancelled = h.store.status_of(P, &waiting.key()).map(|s| s.status)
                == Some(TaskStatus::Cancelled);
            if cancelled && calls_when_cancelled.is_none() {
                calls_when_cancelled = Some(h.recorder.call_times("c").len());
            }
        }
        advance(Duration::from_secs(60)).await;
        assert_eq!(
            calls_when_cancelled,
            Some(h.recorder.call_times("c").len()),
            "the cancel was recorded, and `c` not called after it"
        );
        assert!(h.recorder.call_times("c").len() <= 1);
        assert_eq!(
            h.store.status_of(P, &waiting.key()).map(|s| s.status),
            Some(TaskStatus::Cancelled)
        );
    });
}

/// A first tree dispatches `o/1` (due at 3.5 s, a 5 s call) at 2.5 s: its lease entry,
/// ownership and status checks are done. Just after its periodic epoch read (every second, so
/// it learns of a new owner at 4 s), at 3.1 s, a second node claims the partition and polls a
/// cancel of the task. Returns both nodes and the task.
async fn a_newer_tree_polls_a_cancel() -> (Harness, Harness, Task) {
    let h = Harness::new(SchedulingSettings::default(), Duration::from_secs(5), &[]);
    let other = h.second_node(SchedulingSettings::default());
    h.assign().await;
    let x = task("o", t0() + ms(3_500), "1");
    h.enqueue(vec![x.clone()]).await;
    advance(Duration::from_millis(3_100)).await;
    other.assign().await;
    other.cancel(vec![x.key()]).await;
    (h, other, x)
}

/// A cancel polled by a new tree while an earlier tree, its checks done before the claim, is
/// about to call the task: the cancel waits (durably) for that call, so the task never starts
/// after it was recorded cancelled, and the new tree does not run it again.
#[test]
fn a_cancel_an_earlier_trees_call_could_defeat_is_recorded_only_after_that_call() {
    run_paused(|| async {
        let (h, _other, x) = a_newer_tree_polls_a_cancel().await;
        // The first tree calls x at its time and the call runs 5 s.
        advance(Duration::from_millis(2_500)).await;
        assert_eq!(h.recorder.call_times("o"), vec![t0() + ms(3_500)]);
        assert_eq!(
            h.store.status_of(P, &x.key()),
            None,
            "not recorded cancelled while a call that started after the cancel was polled runs"
        );
        assert_eq!(
            h.store.deferred_cancels(P).await.expect("read").len(),
            1,
            "deferred, durably (the batch was acknowledged)"
        );
        advance(Duration::from_secs(60)).await;
        assert_eq!(
            h.store.status_of(P, &x.key()).map(|s| s.status),
            Some(TaskStatus::Cancelled),
            "recorded once the earlier call ended"
        );
        assert_eq!(h.recorder.call_times("o").len(), 1, "not run again");
        assert!(h.store.deferred_cancels(P).await.expect("read").is_empty());
    });
}

/// A deferred cancel outlives the tree that deferred it: the next tree applies it.
#[test]
fn a_deferred_cancel_left_by_a_stopped_tree_is_applied_by_the_next() {
    run_paused(|| async {
        let (h, other, x) = a_newer_tree_polls_a_cancel().await;
        let third = h.second_node(SchedulingSettings::default());
        advance(Duration::from_millis(1_000)).await;
        // The tree that deferred it goes before the earlier call ends; a third takes over.
        other.topic.send(RevokePartitions).await.expect("revoke");
        third.assign().await;
        advance(Duration::from_secs(60)).await;
        assert_eq!(
            h.store.status_of(P, &x.key()).map(|s| s.status),
            Some(TaskStatus::Cancelled)
        );
        assert_eq!(h.recorder.call_times("o"), vec![t0() + ms(3_500)]);
        assert!(h.store.deferred_cancels(P).await.expect("read").is_empty());
    });
}

/// A cancel that finds the task's dead letter (an earlier tree failed it, and its status write
/// was cut off) restores the failure as its status, unless this tree's call of the task is
/// under way: that call's outcome is the task's status, and the restored failure would be a
/// second final status written under it (found by the simulation, seed 14920 of a 20,000-seed
/// run: `Failed` with 4 attempts restored, then `Failed` with 6 by the call).
#[test]
fn a_cancel_finding_a_dead_letter_restores_no_failure_under_a_call_under_way() {
    use crate::store::{DeadLetter, DeadLetterStore, DeadReason};
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::from_secs(4), &[]);
        h.assign().await;
        let again = task("again", t0() + ms(1_000), "1");
        let letter = DeadLetter {
            partition: P,
            task: again.clone(),
            attempts: 4,
            last_error: "an earlier tree's failure".into(),
            reason: DeadReason::RetriesExhausted,
            dead_at: t0(),
            redriven_at: None,
            redrives: 0,
        };
        h.store.add_dead_letter(letter).await.expect("dead letter");
        h.enqueue(vec![again.clone()]).await;
        // Its call runs from 1 s to 5 s; the cancel comes at 3 s.
        advance(Duration::from_secs(3)).await;
        assert_eq!(h.recorder.call_times("again").len(), 1, "called");
        h.cancel(vec![again.key()]).await;
        advance(Duration::from_secs(10)).await;
        let writes: Vec<TaskStatus> = (h.store.status_writes().into_iter())
            .filter(|(key, _, _)| *key == again.key())
            .map(|(_, status, _)| status.status)
            .collect();
        assert_eq!(writes, [TaskStatus::Cancelled, TaskStatus::Completed]);
    });
}
