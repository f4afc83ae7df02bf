//! Per-key concurrency (`key_concurrency`): a key's calls at once stay within its limit on a
//! node, its other tasks wait at the executor's gate holding no slot, and other keys and
//! tasks without a key are not held up. Fair shares: when tasks wait for the executor's slots,
//! keys take turns.

use super::*;

fn keyed(ordering_id: &str, at: DateTime<Utc>, key: &str) -> Task {
    task(ordering_id, at, "1").with_limit_key(key)
}

/// Tenant a's batch: 400 tasks over 20 orderingIds, all due at 10 s.
pub(super) fn tenant_a_batch_at_10s() -> Vec<Task> {
    (0..400)
        .map(|i| {
            task(
                &format!("a-{}", i % 20),
                t0() + ms(10_000),
                &format!("{i:03}"),
            )
        })
        .map(|t| t.with_limit_key("tenant-a"))
        .collect()
}

/// `count` tasks of tenant a, each of its own orderingId, all due at `t0`.
fn tenant_a(count: usize) -> Vec<Task> {
    (0..count)
        .map(|i| keyed(&format!("a-{i}"), t0(), "tenant-a"))
        .collect()
}

/// Asserts that every one of `tasks` completed.
fn all_completed<'a>(h: &Harness, tasks: impl IntoIterator<Item = &'a Task>) {
    for t in tasks {
        assert_eq!(
            h.store.status_of(P, &t.key()).map(|s| s.status),
            Some(TaskStatus::Completed),
            "{}",
            t.key()
        );
    }
}

#[test]
fn a_keys_calls_at_once_stay_within_its_limit_and_hold_up_no_other_key() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            key_concurrency: Some(2),
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_secs(1), &[]);
        h.assign().await;
        // Twenty orderingIds of tenant a, due together; then b's and an unkeyed task.
        let a = tenant_a(20);
        let b = keyed("b-0", t0() + ms(10), "tenant-b");
        let free = task("free", t0() + ms(10), "1");
        let mut all = a.clone();
        all.extend([b.clone(), free.clone()]);
        h.enqueue(all).await;
        advance(Duration::from_secs(30)).await;
        assert_eq!(h.recorder.peak_of_limit_key("tenant-a"), 2);
        all_completed(&h, a.iter().chain([&b, &free]));
        // a's twenty calls of 1 s, two at a time, take ten seconds; b and the unkeyed task
        // are called at their time, not after them.
        let a_times: Vec<_> = a
            .iter()
            .flat_map(|t| h.recorder.call_times(&t.ordering_id))
            .collect();
        let last_a = a_times.iter().max().copied().expect("a ran");
        assert!(last_a >= t0() + ms(9_000), "{last_a}");
        for t in [&b, &free] {
            assert_eq!(
                h.recorder.call_times(&t.ordering_id),
                [t0() + ms(10)],
                "{} is not held up by tenant a",
                t.ordering_id
            );
        }
    });
}

#[test]
fn a_flooding_key_does_not_hold_up_another_keys_task_beyond_its_turn() {
    run_paused(|| async {
        // No limit: only the executor's two slots, which the keys share.
        let settings = SchedulingSettings {
            executor_concurrency: 2,
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_secs(1), &[]);
        h.assign().await;
        let a = tenant_a(40);
        let b = keyed("b-0", t0() + ms(10), "tenant-b");
        let free = task("free", t0() + ms(10), "1");
        let mut all = a.clone();
        all.extend([b.clone(), free.clone()]);
        h.enqueue(all).await;
        advance(Duration::from_secs(40)).await;
        all_completed(&h, a.iter().chain([&b, &free]));
        // Come after a's forty, b and the unkeyed task get the first turns of the round
        // (a, b, no key) as slots are given back, two a second: b at 1 s, the unkeyed task at
        // 2 s. First come, first served, they would wait for a's backlog: 20 s.
        for (t, by) in [(&b, ms(1_100)), (&free, ms(2_100))] {
            let called = h.recorder.call_times(&t.ordering_id);
            assert_eq!(called.len(), 1);
            assert!(
                called[0] <= t0() + by,
                "{} called at {}, behind tenant a's backlog",
                t.ordering_id,
                called[0]
            );
        }
    });
}

/// A key flooding a partition with due tasks holds a quarter of the tree's memory: its later
/// tasks wait in Cassandra, listed, and another key's task due after all of them is loaded at
/// its time and called at its turn, not once the flood has run.
#[test]
fn a_flooding_key_holds_its_share_of_the_trees_memory_and_another_keys_later_task_is_not_held_up() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            executor_concurrency: 2,
            max_in_flight_tasks: 40,
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_millis(100), &[]);
        h.assign().await;
        // 200 of tenant a, due at 0-199 ms; b's task due after all of them, at 1.5 s.
        let a: Vec<Task> = (0..200)
            .map(|i| keyed(&format!("a-{i}"), t0() + ms(i), "tenant-a"))
            .collect();
        let b = keyed("b-0", t0() + ms(1_500), "tenant-b");
        let mut all = a.clone();
        all.push(b.clone());
        h.enqueue(all).await;
        advance(Duration::from_secs(60)).await;
        all_completed(&h, a.iter().chain([&b]));
        for t in &a {
            assert_eq!(
                h.recorder.call_times(&t.ordering_id).len(),
                1,
                "{}",
                t.key()
            );
        }
        // Two slots, 100 ms calls: a's flood takes 10 s. b, in memory at its time, gets the
        // next turn of the round.
        let called = h.recorder.call_times("b-0");
        assert!(
            called[0] <= t0() + ms(1_700),
            "b called at {}, behind tenant a's flood",
            called[0]
        );
        assert!(
            h.store.deferred_rows_read() > 0,
            "a's later tasks were deferred and read back"
        );
    });
}

/// A key's tasks enqueued ahead of their common time, far beyond its share of the tree's
/// memory, are deferred by orderingId as they are persisted: loading does not stop at them, so
/// another key's task due just after them is pushed as it is persisted and called at its time,
/// not once loading has passed the flood (before, the flood filled the tree's memory while not
/// due, loading stopped at its time, and b waited for every load of it, each slowed here to
/// 300 ms).
#[test]
fn a_keys_flood_enqueued_ahead_of_its_time_does_not_hold_loading_behind_it() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            executor_concurrency: 2,
            max_in_flight_tasks: 40,
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_millis(50), &[]);
        h.assign().await;
        h.store
            .set_latency("schedule load", Duration::from_millis(300));
        // 400 of tenant a over 20 orderingIds, all due at 10 s; b's due just after them.
        let a = tenant_a_batch_at_10s();
        h.enqueue(a.clone()).await;
        let b = keyed("b-0", t0() + ms(10_100), "tenant-b");
        h.enqueue(vec![b.clone()]).await;
        advance(Duration::from_secs(60)).await;
        all_completed(&h, a.iter().chain([&b]));
        for o in 0..20 {
            let calls = h.recorder.call_times(&format!("a-{o}"));
            assert_eq!(calls.len(), 20, "a-{o}: each of its tasks once");
        }
        // Two slots, 50 ms calls: b's turn comes within a call of its time.
        let called = h.recorder.call_times("b-0");
        assert!(
            called[0] <= t0() + ms(10_200),
            "b called at {}, behind the loads of tenant a's flood",
            called[0]
        );
        assert!(
            h.store.deferred_rows_read() > 0,
            "a's tasks were deferred and read back"
        );
    });
}

#[test]
fn a_keys_read_backs_under_way_together_stay_within_its_share_of_memory() {
    run_paused(|| async {
        // Tenant a's 400 tasks over 20 orderingIds, due together and enqueued ahead: a tree
        // holds 10 (a quarter of 40), the rest are deferred. As a's tasks end, its orderingIds
        // read back in turns; with reads slow, many are under way at once. Each must count
        // in a's share: the noisy-neighbour bench at 200,000 saw a's read-backs reserve every
        // tree's whole memory at the flood's time, and b's tasks, finding no room, waited
        // for loading to pass the flood again (55 s late).
        let settings = SchedulingSettings {
            max_in_flight_tasks: 40,
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_millis(5), &[]);
        h.assign().await;
        h.store
            .set_latency("task batch read", Duration::from_millis(200));
        let a = tenant_a_batch_at_10s();
        h.enqueue(a.clone()).await;
        advance(Duration::from_millis(9_500)).await;
        let in_flight = h.in_flight.get(P).expect("the partition's gauge");
        let mut most = 0;
        for _ in 0..1_000 {
            advance(Duration::from_millis(10)).await;
            most = most.max(in_flight.current());
        }
        advance(Duration::from_secs(60)).await;
        all_completed(&h, a.iter());
        assert!(
            most <= 10,
            "{most} tasks in memory or being read back while tenant a drained (its share: 10)"
        );
    });
}

#[test]
fn a_keys_starts_keep_to_its_rate_and_another_keys_task_starts_at_its_time() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            key_rate: Some(5.0),
            key_burst: Some(1),
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_millis(10), &[]);
        h.assign().await;
        let a = tenant_a(20);
        let b = keyed("b-0", t0() + ms(10), "tenant-b");
        let mut all = a.clone();
        all.push(b.clone());
        h.enqueue(all).await;
        advance(Duration::from_secs(30)).await;
        let mut starts: Vec<_> = a
            .iter()
            .flat_map(|t| h.recorder.call_times(&t.ordering_id))
            .collect();
        starts.sort();
        assert_eq!(starts.len(), 20, "each of a's tasks ran once");
        // Five a second, one at a time: 200 ms apart, the first at its time.
        assert_eq!(starts[0], t0());
        for pair in starts.windows(2) {
            assert!(pair[1] - pair[0] >= ms(200) - ms(1), "{pair:?}");
        }
        assert!(starts[19] <= t0() + ms(3_800 + 500), "{}", starts[19]);
        assert_eq!(h.recorder.call_times("b-0"), [t0() + ms(10)]);
    });
}

#[test]
fn tasks_held_by_their_keys_limit_are_not_counted_stale() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            key_concurrency: Some(1),
            stale_after: Duration::from_secs(10),
            backoff_factor: Duration::from_secs(3600),
            max_backoff: Duration::from_secs(3600),
            ..SchedulingSettings::default()
        };
        let h = Harness::new(
            settings,
            Duration::from_secs(60),
            &[("stuck", Behaviour::FailAlways)],
        );
        h.assign().await;
        // Three of tenant a at a limit of one (one called, two held), and an unkeyed task whose
        // call runs long: all 45 s overdue, only the unkeyed one stale.
        let mut all = tenant_a(3);
        all.push(task("stuck", t0(), "1"));
        h.enqueue(all).await;
        advance(Duration::from_secs(45)).await;
        let text = h.metrics.encode(&h.in_flight);
        assert!(
            text.contains("scheduler_stale_tasks{partition=\"0\"} 1"),
            "the tasks of tenant a are held by its limit, not stale:\n{text}"
        );
        assert!(
            text.contains("scheduler_tasks_held_by_limit{task_type=\"default\"} 2"),
            "{text}"
        );
    });
}
