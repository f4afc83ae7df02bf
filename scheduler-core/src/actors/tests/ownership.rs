//! Revokes, rebuilds and fencing: a tree that stops lets its calls finish, a fenced tree
//! starts and records nothing more.

use super::*;

#[test]
fn repeated_load_failures_rebuild_the_partition_and_nothing_is_lost() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.store
            .persist(P, vec![task("survivor", t0() + ms(1_000), "1")])
            .await
            .expect("persist");
        h.store.fail_next(5);
        h.assign().await;
        advance(Duration::from_secs(60)).await;
        let times = h.recorder.call_times("survivor");
        assert_eq!(times.len(), 1);
        // 5 failed loads (retries after 0.5, 1, 2, 4 s), a 1 s rebuild delay, then the task runs.
        assert!(
            times[0] > t0() + ms(8_000),
            "ran after the rebuild at {}",
            times[0]
        );
    });
}

#[test]
fn revoke_lets_running_tasks_finish_and_abandons_pending_retries() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            drain_timeout: Duration::from_secs(10),
            ..SchedulingSettings::default()
        };
        let h = Harness::new(
            settings,
            Duration::from_secs(3),
            &[("retrying", Behaviour::FailAlways)],
        );
        h.assign().await;
        let long = task("long", t0() + ms(1_000), "1");
        let retrying = task("retrying", t0(), "1");
        let later = task("later", t0() + ms(60_000), "1");
        h.enqueue(vec![long.clone(), retrying.clone(), later.clone()])
            .await;
        advance(Duration::from_secs(2)).await;
        // "long" is mid-run; "retrying" failed once and waits for its retry.
        let before = tokio::time::Instant::now();
        let drained = h.topic.send(RevokePartitions).await.expect("revoke");
        let drained_in = before.elapsed();
        assert!(
            drained,
            "the running task finished within the drain timeout"
        );
        assert!(
            drained_in >= Duration::from_secs(1) && drained_in < Duration::from_secs(3),
            "{drained_in:?}"
        );
        assert_eq!(
            h.store.status_of(P, &long.key()).map(|s| s.status),
            Some(TaskStatus::Completed)
        );
        assert_eq!(
            h.store.status_of(P, &retrying.key()),
            None,
            "left for the next owner"
        );
        advance(Duration::from_secs(120)).await;
        assert!(
            h.recorder.call_times("later").is_empty(),
            "nothing runs after revoke"
        );
        assert_eq!(h.recorder.call_times("retrying").len(), 1);
        let left: Vec<TaskKey> = h.store.scheduled(P);
        assert_eq!(
            left,
            vec![retrying.key(), later.key()],
            "unfinished tasks stay in the schedule"
        );
    });
}

#[test]
fn revoke_reports_a_drain_that_timed_out() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            drain_timeout: Duration::from_secs(1),
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_secs(5), &[]);
        h.assign().await;
        h.enqueue(vec![task("slow", t0(), "1")]).await;
        advance(Duration::from_millis(100)).await;
        let before = tokio::time::Instant::now();
        let drained = h.topic.send(RevokePartitions).await.expect("revoke");
        assert!(!drained, "the task outlives the drain timeout");
        assert!(
            before.elapsed() < Duration::from_secs(2),
            "{:?}",
            before.elapsed()
        );
    });
}

#[test]
fn a_fenced_tree_starts_nothing_more_and_is_not_rebuilt() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.assign().await;
        let before = task("before", t0() + ms(1_000), "1");
        let after = task("after", t0() + ms(10_000), "1");
        h.enqueue(vec![before.clone(), after.clone()]).await;
        advance(Duration::from_secs(2)).await;
        assert_eq!(h.recorder.call_times("before").len(), 1);
        // Another node claims the partition (this one was paused and lost it without noticing).
        h.store.claim_elsewhere(P);
        advance(Duration::from_secs(30)).await;
        assert!(
            h.recorder.call_times("after").is_empty(),
            "a fenced tree starts nothing"
        );
        assert_eq!(h.store.status_of(P, &after.key()), None);
        assert_eq!(
            h.store.scheduled(P),
            vec![after.key()],
            "the task stays in the schedule for the new owner"
        );
        let text = h.metrics.encode(&h.in_flight);
        let rejections: f64 = text
            .lines()
            .filter_map(|l| l.strip_prefix("scheduler_fencing_rejections_total{partition=\"0\"} "))
            .filter_map(|v| v.parse::<f64>().ok())
            .sum();
        assert!(rejections >= 1.0, "{text}");
        let owned = h.topic.send(OwnedPartitions).await.expect("owned");
        assert!(
            owned.is_empty(),
            "a fenced partition is dropped, not rebuilt"
        );
    });
}

#[test]
fn a_task_running_when_its_tree_is_fenced_does_not_record_its_outcome() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::from_secs(5), &[]);
        h.assign().await;
        let running = task("running", t0(), "1");
        h.enqueue(vec![running.clone()]).await;
        advance(Duration::from_millis(100)).await;
        h.store.claim_elsewhere(P);
        advance(Duration::from_secs(30)).await;
        assert_eq!(h.recorder.call_times("running").len(), 1, "it ran once");
        assert_eq!(
            h.store.status_of(P, &running.key()),
            None,
            "a fenced tree records no outcome"
        );
        assert_eq!(h.store.scheduled(P), vec![running.key()]);
    });
}

#[test]
fn a_batch_polled_while_a_fenced_tree_drains_is_refused_for_the_next_owner() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::from_secs(5), &[]);
        h.assign().await;
        h.enqueue(vec![
            task("running", t0(), "1"),
            task("other", t0() + ms(1_000), "1"),
        ])
        .await;
        advance(Duration::from_millis(100)).await;
        h.store.claim_elsewhere(P);
        // "other" meets the fence at 1 s; the tree drains while "running" runs until 5 s.
        advance(Duration::from_millis(1_500)).await;
        let late = task("late", t0() + ms(60_000), "1");
        let reply = h
            .offer(PolledTasks {
                tasks: vec![h.enqueued(late.clone())],
                cancels: vec![],
                ..PolledTasks::default()
            })
            .await;
        assert!(reply.persisted.is_empty(), "{reply:?}");
        assert_eq!(reply.failed.len(), 1, "{reply:?}");
        assert!(
            !h.store.scheduled(P).contains(&late.key()),
            "nothing written by a fenced tree"
        );
    });
}

#[test]
fn a_tree_claims_its_partition_when_it_starts_so_a_rebuild_fences_the_old_one() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.assign().await;
        advance(Duration::from_millis(10)).await;
        assert_eq!(h.store.partition_epoch(P).await.expect("epoch"), 1);
        h.topic.send(RevokePartitions).await.expect("revoke");
        h.assign().await;
        advance(Duration::from_millis(10)).await;
        assert_eq!(h.store.partition_epoch(P).await.expect("epoch"), 2);
        h.enqueue(vec![task("a", t0() + ms(5_000), "1")]).await;
        advance(Duration::from_secs(10)).await;
        assert_eq!(h.recorder.call_times("a").len(), 1, "the newest tree runs");
    });
}

#[test]
fn a_rebuilt_tree_checks_the_epoch_it_inherits_instead_of_claiming_again() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        // Five failed loads make the tree escalate and be rebuilt about 8.5 s after it starts.
        h.store.fail_next(5);
        h.assign().await;
        advance(Duration::from_secs(1)).await;
        assert_eq!(h.store.partition_epoch(P).await.expect("epoch"), 1);
        // Meanwhile the node loses the partition without noticing.
        h.store.claim_elsewhere(P);
        advance(Duration::from_secs(30)).await;
        assert_eq!(
            h.store.partition_epoch(P).await.expect("epoch"),
            2,
            "the rebuild did not take the partition back"
        );
        let owned = h.topic.send(OwnedPartitions).await.expect("owned");
        assert!(owned.is_empty(), "the rebuilt tree found itself fenced");
    });
}

/// A handler that works until its call is asked to stop, then gives up with a retryable
/// error, as the [`crate::StopReason`] docs ask of a long call (and as a remote call whose
/// claim ends with its tree does).
struct GivesUpWhenStopped {
    calls: Arc<AtomicUsize>,
}

impl TaskHandler for GivesUpWhenStopped {
    async fn execute(&self, _: &Task, ctx: &TaskContext) -> Result<(), TaskError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let reason = ctx.stopped().await;
        Err(TaskError::retry(format!("stopped: {reason:?}")))
    }
}

#[test]
fn a_call_that_gives_up_because_its_tree_stops_is_not_charged_an_attempt() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            max_task_retries: 2,
            ..SchedulingSettings::default()
        };
        let calls = Arc::new(AtomicUsize::new(0));
        let handlers = crate::handler::Handlers::new().fallback(GivesUpWhenStopped {
            calls: Arc::clone(&calls),
        });
        let store = MemoryStore::new();
        let recorder = Recorder::new(TokioClock::starting_at(t0()), &store, Duration::ZERO, &[]);
        let h = Harness::node_with("test-node", settings, store, recorder, handlers);
        let long = task("long", t0(), "1");
        h.store
            .persist(P, vec![long.clone()])
            .await
            .expect("persist");
        // Five rebalances while it runs, more than its retries.
        for round in 1..=5 {
            h.assign().await;
            advance(Duration::from_secs(2)).await;
            assert_eq!(
                calls.load(Ordering::SeqCst),
                round,
                "called in round {round}"
            );
            assert!(h.topic.send(RevokePartitions).await.expect("revoke"));
        }
        assert_eq!(
            h.store.status_of(P, &long.key()),
            None,
            "not failed: no call failed on its own"
        );
        assert_eq!(
            h.store.attempts(P, &long.key()),
            vec![],
            "no attempt charged"
        );
        assert_eq!(
            h.store.scheduled(P),
            vec![long.key()],
            "left for the next owner"
        );
    });
}

#[test]
fn a_call_that_gives_up_because_its_lease_was_lost_is_called_again_as_the_same_attempt() {
    run_paused(|| async {
        let calls = Arc::new(AtomicUsize::new(0));
        let handlers = crate::handler::Handlers::new().fallback(GivesUpWhenStopped {
            calls: Arc::clone(&calls),
        });
        let store = MemoryStore::new();
        let recorder = Recorder::new(TokioClock::starting_at(t0()), &store, Duration::ZERO, &[]);
        let settings = SchedulingSettings::default();
        let h = Harness::node_with("test-node", settings.clone(), store, recorder, handlers);
        let long = task("long", t0(), "1");
        h.store
            .persist(P, vec![long.clone()])
            .await
            .expect("persist");
        h.assign().await;
        advance(Duration::from_secs(1)).await;
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        // Lease writes take longer than the lease's time to live: the renewal does not
        // succeed in time, the lease is lost and the call gives up; then the store is fast again.
        h.store.set_latency("lease write", settings.lease_ttl * 2);
        advance(settings.lease_ttl * 2).await;
        h.store.set_latency("lease write", Duration::ZERO);
        advance(Duration::from_secs(30)).await;
        assert_eq!(calls.load(Ordering::SeqCst), 2, "called again");
        assert_eq!(
            h.store.attempts(P, &long.key()),
            vec![],
            "the lost lease's call is not charged an attempt"
        );
        assert_eq!(h.store.status_of(P, &long.key()), None);
    });
}
