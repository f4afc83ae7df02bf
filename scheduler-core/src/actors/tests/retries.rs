//! Failed attempts: backoff, exhausted retries, panics and hangs, and the counters they leave.

use super::*;

#[test]
fn failures_retry_after_jittered_exponential_backoff_then_complete() {
    run_paused(|| async {
        let h = Harness::new(
            SchedulingSettings::default(),
            Duration::ZERO,
            &[("flaky", Behaviour::FailTimes(3))],
        );
        h.assign().await;
        let flaky = task("flaky", t0(), "1");
        h.enqueue(vec![flaky.clone()]).await;
        advance(Duration::from_secs(600)).await;
        let times = h.recorder.call_times("flaky");
        assert_eq!(times.len(), 4);
        // Factor 20 s: retry n waits between half and all of 20 s * 2^(n-1).
        for (n, pair) in times.windows(2).enumerate() {
            let gap = (pair[1] - pair[0]).num_milliseconds();
            let period = 20_000 << n;
            assert!(
                (period / 2..=period).contains(&gap),
                "retry {} after {gap} ms",
                n + 1
            );
        }
        let status = h.store.status_of(P, &flaky.key()).expect("status");
        assert_eq!((status.status, status.attempts), (TaskStatus::Completed, 4));
        let outcomes: Vec<AttemptOutcome> = h
            .store
            .attempts(P, &flaky.key())
            .iter()
            .map(|a| a.outcome)
            .collect();
        assert_eq!(
            outcomes,
            [
                AttemptOutcome::Failed,
                AttemptOutcome::Failed,
                AttemptOutcome::Failed,
                AttemptOutcome::Succeeded
            ]
        );
    });
}

#[test]
fn exhausted_retries_record_failure_and_the_task_never_runs_again() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            max_task_retries: 2,
            backoff_factor: Duration::from_secs(1),
            max_backoff: Duration::from_secs(2),
            ..SchedulingSettings::default()
        };
        let h = Harness::new(
            settings,
            Duration::ZERO,
            &[
                ("doomed", Behaviour::FailAlways),
                ("bad", Behaviour::GiveUp),
            ],
        );
        h.assign().await;
        let doomed = task("doomed", t0(), "1");
        let bad = task("bad", t0(), "1");
        h.enqueue(vec![doomed.clone(), bad.clone()]).await;
        advance(Duration::from_secs(60)).await;
        assert_eq!(
            h.recorder.call_times("doomed").len(),
            3,
            "first attempt plus 2 retries"
        );
        let failed = h.store.status_of(P, &doomed.key()).expect("status");
        assert_eq!((failed.status, failed.attempts), (TaskStatus::Failed, 3));
        assert_eq!(failed.last_error.as_deref(), Some("flaky"));
        assert_eq!(
            h.recorder.call_times("bad").len(),
            1,
            "a give-up is not retried"
        );
        assert_eq!(
            h.store.status_of(P, &bad.key()).map(|s| s.status),
            Some(TaskStatus::Dropped)
        );

        // Scheduling them again (same keys) does not run them again.
        h.enqueue(vec![doomed, bad]).await;
        advance(Duration::from_secs(60)).await;
        assert_eq!(h.recorder.call_times("doomed").len(), 3);
        assert_eq!(h.recorder.call_times("bad").len(), 1);
    });
}

#[test]
fn a_panicking_or_hanging_executor_is_a_failed_attempt_that_is_retried() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            execution_timeout: Duration::from_secs(5),
            backoff_factor: Duration::from_secs(1),
            ..SchedulingSettings::default()
        };
        let h = Harness::new(
            settings,
            Duration::ZERO,
            &[
                ("panics", Behaviour::PanicOnce),
                ("hangs", Behaviour::HangOnce),
            ],
        );
        h.assign().await;
        let panics = task("panics", t0(), "1");
        let hangs = task("hangs", t0(), "1");
        h.enqueue(vec![panics.clone(), hangs.clone()]).await;
        advance(Duration::from_secs(60)).await;
        for (t, error) in [
            (&panics, "the executor panicked"),
            (&hangs, "timed out after 5s"),
        ] {
            let status = h.store.status_of(P, &t.key()).expect("finished");
            assert_eq!((status.status, status.attempts), (TaskStatus::Completed, 2));
            let first = &h.store.attempts(P, &t.key())[0];
            assert_eq!(first.outcome, AttemptOutcome::Failed);
            let recorded = first.error.as_deref().unwrap_or_default();
            assert!(recorded.starts_with(error), "{recorded}");
        }
        let hang_calls = h.recorder.call_times("hangs");
        assert!(
            hang_calls[1] >= t0() + ms(5_500),
            "retried after the timeout and a backoff: {hang_calls:?}"
        );
    });
}

#[test]
fn counters_are_kept_across_revokes_for_the_life_of_the_node() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        let completed = |h: &Harness| -> f64 {
            h.metrics
                .encode(&h.in_flight)
                .lines()
                .filter_map(|l| {
                    l.strip_prefix(
                        "scheduler_executions_total{partition=\"0\",outcome=\"completed\"} ",
                    )
                })
                .filter_map(|v| v.parse::<f64>().ok())
                .sum()
        };
        for round in 1..=2 {
            h.assign().await;
            h.enqueue(vec![task("a", t0(), &round.to_string())]).await;
            advance(Duration::from_secs(1)).await;
            h.topic.send(RevokePartitions).await.expect("revoke");
            assert_eq!(completed(&h), f64::from(round));
        }
    });
}

#[test]
fn attempt_numbers_and_the_retry_budget_continue_in_the_next_tree() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            max_task_retries: 3,
            backoff_factor: Duration::from_secs(10),
            max_backoff: Duration::from_secs(10),
            ..SchedulingSettings::default()
        };
        let h = Harness::new(
            settings,
            Duration::ZERO,
            &[("doomed", Behaviour::FailAlways)],
        );
        h.assign().await;
        let doomed = task("doomed", t0(), "1");
        h.enqueue(vec![doomed.clone()]).await;
        // The first attempt and the first retry (5-10 s later) fail in this tree; the second
        // retry comes 5-10 s after that, so at 10 s or later (checking at 11 s saw it in 2% of
        // runs, when both backoffs drew close to 5 s).
        advance(Duration::from_millis(10_001)).await;
        assert_eq!(h.recorder.call_times("doomed").len(), 2);
        h.topic.send(RevokePartitions).await.expect("revoke");
        // The next tree loads the task again: it goes on from attempt 3, with one retry left.
        h.assign().await;
        advance(Duration::from_secs(120)).await;
        assert_eq!(
            h.recorder.call_times("doomed").len(),
            4,
            "the first attempt and 3 retries, across both trees"
        );
        let numbers: Vec<u32> = h
            .store
            .attempts(P, &doomed.key())
            .iter()
            .map(|a| a.attempt)
            .collect();
        assert_eq!(numbers, vec![1, 2, 3, 4], "no attempt overwritten");
        let failed = h.store.status_of(P, &doomed.key()).expect("status");
        assert_eq!((failed.status, failed.attempts), (TaskStatus::Failed, 4));
    });
}

#[test]
fn the_first_tree_a_partition_ever_had_reads_no_attempts_and_a_later_one_reads_those_it_must() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            backoff_factor: Duration::from_secs(10),
            max_backoff: Duration::from_secs(10),
            ..SchedulingSettings::default()
        };
        let h = Harness::new(
            settings,
            Duration::ZERO,
            &[
                ("fine", Behaviour::Succeed),
                ("doomed", Behaviour::FailAlways),
            ],
        );
        h.assign().await;
        // Due as the tree starts: an earlier tree could have called them, had there been one.
        let fine: Vec<Task> = (0..5).map(|n| task("fine", t0(), &n.to_string())).collect();
        let doomed = task("doomed", t0(), "d");
        let mut all = fine.clone();
        all.push(doomed.clone());
        h.enqueue(all).await;
        advance(Duration::from_secs(5)).await;
        for t in &fine {
            let status = h.store.status_of(P, &t.key()).map(|s| s.status);
            assert_eq!(status, Some(TaskStatus::Completed));
        }
        assert_eq!(
            h.store.requests_of("attempts read"),
            0,
            "no tree of the partition came before this one"
        );
        // The next tree finds the retrying task due before it started: it reads its attempts.
        h.topic.send(RevokePartitions).await.expect("revoke");
        h.assign().await;
        advance(Duration::from_secs(30)).await;
        assert!(h.store.requests_of("attempts read") >= 1);
        let numbers: Vec<u32> = (h.store.attempts(P, &doomed.key()).iter())
            .map(|a| a.attempt)
            .collect();
        assert!(numbers.windows(2).all(|w| w[1] == w[0] + 1), "{numbers:?}");
    });
}

#[test]
fn a_rebuilt_tree_goes_on_from_the_attempts_of_the_tree_it_replaced_even_the_first() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            max_task_retries: 20,
            backoff_factor: Duration::from_secs(1),
            max_backoff: Duration::from_secs(1),
            // A load every second or so, so that failing ones soon rebuild the tree.
            max_look_ahead: Duration::from_secs(2),
            prefetch_window: Duration::from_secs(1),
            ..SchedulingSettings::default()
        };
        let h = Harness::new(
            settings,
            Duration::ZERO,
            &[("doomed", Behaviour::FailAlways)],
        );
        h.assign().await;
        let doomed = task("doomed", t0(), "d");
        h.enqueue(vec![doomed.clone()]).await;
        advance(Duration::from_secs(3)).await;
        assert!(
            !h.store.attempts(P, &doomed.key()).is_empty(),
            "attempts made"
        );
        // Loads fail until the partition is rebuilt: the new tree inherits the first one's
        // epoch (1), and must still read the attempts it made.
        h.store.fail_op("schedule load", 8);
        advance(Duration::from_secs(30)).await;
        let numbers: Vec<u32> = (h.store.attempts(P, &doomed.key()).iter())
            .map(|a| a.attempt)
            .collect();
        let expected: Vec<u32> = (1..=numbers.len() as u32).collect();
        assert_eq!(numbers, expected, "no attempt number used twice");
        assert!(
            h.store.requests_of("attempts read") >= 1,
            "the rebuilt tree read them"
        );
    });
}

#[test]
fn a_task_done_in_one_attempt_is_recorded_by_its_status_alone() {
    run_paused(|| async {
        let h = Harness::new(
            SchedulingSettings::default(),
            Duration::ZERO,
            &[("invalid", Behaviour::GiveUp)],
        );
        h.assign().await;
        let (fine, invalid) = (task("fine", t0(), "1"), task("invalid", t0(), "1"));
        h.enqueue(vec![fine.clone(), invalid.clone()]).await;
        advance(Duration::from_secs(5)).await;
        for (t, status) in [
            (&fine, TaskStatus::Completed),
            (&invalid, TaskStatus::Dropped),
        ] {
            assert_eq!(
                h.store
                    .status_of(P, &t.key())
                    .map(|s| (s.status, s.attempts)),
                Some((status, 1))
            );
            assert!(h.store.attempts(P, &t.key()).is_empty(), "no attempt row");
        }
        assert_eq!(
            h.store
                .status_of(P, &invalid.key())
                .and_then(|s| s.last_error),
            Some("invalid payload".into())
        );
    });
}

#[test]
fn a_task_waiting_for_its_retry_is_in_the_retrying_set_until_its_run_ends() {
    run_paused(|| async {
        let h = Harness::new(
            SchedulingSettings::default(),
            Duration::ZERO,
            &[
                ("flaky", Behaviour::FailTimes(2)),
                ("stuck", Behaviour::FailAlways),
            ],
        );
        h.assign().await;
        let flaky = task("flaky", t0(), "1");
        let stuck = task("stuck", t0(), "1");
        h.enqueue(vec![flaky.clone(), stuck.clone()]).await;
        advance(Duration::from_secs(1)).await;
        let retry = h
            .retrying
            .of(&flaky.key())
            .expect("flaky waits for its retry");
        let first = h.recorder.call_times("flaky")[0];
        // Factor 20 s: the first retry waits between 10 and 20 s.
        let wait = (retry.next_attempt_at - first).num_milliseconds();
        assert!((10_000..=20_000).contains(&wait), "{wait} ms");
        assert_eq!((retry.attempts, retry.partition), (1, P));
        assert!(retry.error.is_some(), "{retry:?}");
        let listed: Vec<String> = (h.retrying.list().into_iter())
            .map(|(key, _)| key.ordering_id)
            .collect();
        assert_eq!(listed.len(), 2, "{listed:?}");
        // Its second failure moves its next attempt on; its success takes it out.
        advance(Duration::from_secs(21)).await;
        assert_eq!(h.retrying.of(&flaky.key()).map(|r| r.attempts), Some(2));
        advance(Duration::from_secs(60)).await;
        assert_eq!(h.recorder.call_times("flaky").len(), 3);
        assert_eq!(h.retrying.of(&flaky.key()), None, "completed");
        assert!(h.retrying.of(&stuck.key()).is_some());
        // A task left to the next tree leaves the set with its run.
        assert!(h.topic.send(RevokePartitions).await.expect("revoke"));
        advance(Duration::from_secs(1)).await;
        assert!(h.retrying.list().is_empty(), "{:?}", h.retrying.list());
    });
}
