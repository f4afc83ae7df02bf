//! Memory bounds: backlogs, floods, and deferring an orderingId's tasks beyond its share.

use super::*;

#[test]
fn a_large_backlog_drains_with_in_flight_tasks_bounded() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            max_in_flight_tasks: 50,
            // Larger than the reload gap (a quarter of 50), so loads must be sized by capacity.
            fetch_batch_size: 40,
            executor_concurrency: 8,
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_millis(1), &[]);
        let backlog: Vec<Task> = (0..2_000)
            .map(|i| {
                task(
                    &format!("o{}", i % 97),
                    t0() - ms(3_000_000) + ms(i),
                    &i.to_string(),
                )
            })
            .collect();
        h.store.persist(P, backlog).await.expect("persist");
        h.assign().await;
        advance(Duration::from_secs(120)).await;
        assert_eq!(
            h.recorder.calls().len(),
            2_000,
            "every task of the backlog ran"
        );
        let peak = h.recorder.peak_in_flight.load(Ordering::SeqCst);
        assert!(
            peak <= 50,
            "at most max_in_flight_tasks loaded and unfinished, saw {peak}"
        );
        assert!(peak >= 20, "loading keeps the pipeline busy, saw {peak}");
        let gauge_peak = h.in_flight.get(P).map(|g| g.peak()).unwrap_or_default();
        assert!(gauge_peak <= 50, "in-flight gauge peaked at {gauge_peak}");
        assert!(h.store.scheduled(P).is_empty());
    });
}

#[test]
fn a_flood_of_due_tasks_while_running_stays_within_the_in_flight_bound() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            max_in_flight_tasks: 50,
            fetch_batch_size: 40,
            executor_concurrency: 8,
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_millis(1), &[]);
        h.assign().await;
        // Caught up: the read cursor is at the look-ahead horizon, so new due tasks are pushed.
        advance(Duration::from_secs(1)).await;
        for batch in 0..4 {
            let tasks: Vec<Task> = (0..500)
                .map(|i| {
                    let n = batch * 500 + i;
                    task(&format!("o{}", n % 97), t0() + ms(1_000), &n.to_string())
                })
                .collect();
            h.enqueue(tasks).await;
        }
        advance(Duration::from_secs(120)).await;
        let calls = h.recorder.calls();
        let distinct: std::collections::HashSet<&TaskKey> = calls.iter().map(|(k, _)| k).collect();
        assert_eq!(
            (calls.len(), distinct.len()),
            (2_000, 2_000),
            "every task ran, once"
        );
        let peak = h.in_flight.get(P).map(|g| g.peak()).unwrap_or_default();
        assert!(
            peak <= 50,
            "tasks in memory stayed within max_in_flight_tasks, saw {peak}"
        );
        assert!(h.store.scheduled(P).is_empty());
    });
}

#[test]
fn one_stuck_ordering_id_does_not_hold_up_the_others() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            max_in_flight_tasks: 10,
            backoff_factor: Duration::from_secs(1),
            max_backoff: Duration::from_secs(2),
            ..SchedulingSettings::default()
        };
        let h = Harness::new(
            settings,
            Duration::ZERO,
            &[("stuck", Behaviour::FailAlways)],
        );
        h.assign().await;
        let stuck: Vec<Task> = (0..20)
            .map(|i| task("stuck", t0(), &format!("{i:02}")))
            .collect();
        h.enqueue(stuck).await;
        advance(Duration::from_secs(1)).await;
        let other = task("other", t0() + ms(2_000), "1");
        h.enqueue(vec![other.clone()]).await;
        advance(Duration::from_secs(5)).await;
        assert_eq!(
            h.recorder.call_times("other"),
            [t0() + ms(2_000)],
            "another orderingId of the partition runs on time"
        );
        let held = h.in_flight.get(P).map(|g| g.current()).unwrap_or_default();
        assert!(held <= 10, "{held} tasks in memory");
    });
}

#[test]
fn a_deep_ordering_id_runs_every_task_in_order_through_its_bounded_queue() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            max_in_flight_tasks: 40,
            max_queued_per_ordering: 4,
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_millis(5), &[]);
        h.assign().await;
        let deep: Vec<Task> = (0..300)
            .map(|i| task("deep", t0() + ms(i / 10), &format!("{i:03}")))
            .collect();
        let expected: Vec<TaskKey> = deep.iter().map(Task::key).collect();
        for chunk in deep.chunks(50) {
            h.enqueue(chunk.to_vec()).await;
            advance(Duration::from_millis(20)).await;
        }
        advance(Duration::from_secs(30)).await;
        let ran: Vec<TaskKey> = h.recorder.calls().into_iter().map(|(k, _)| k).collect();
        assert_eq!(ran, expected, "each once, in order");
        assert_eq!(overlaps(&h), 0);
    });
}

#[test]
fn a_task_deferred_while_a_read_back_finds_nothing_is_read_back_once_it_ends() {
    run_paused(|| async {
        // An orderingId may hold 4 tasks. a..f are due at once: e and f wait in the store and
        // are read back whole, so more may follow them. The next read-back (slow) finds
        // nothing; g falls due and is deferred during it, and the orderingId's last tasks
        // finish during it too: nothing is left to start another read but its end.
        let settings = SchedulingSettings {
            max_in_flight_tasks: 16,
            max_queued_per_ordering: 4,
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_millis(100), &[]);
        h.assign().await;
        let mut tasks: Vec<Task> = ["a", "b", "c", "d", "e", "f"]
            .into_iter()
            .map(|u| task("o", t0(), u))
            .collect();
        tasks.push(task("o", t0() + ms(1_350), "g"));
        h.enqueue(tasks.clone()).await;
        h.store
            .set_latency("deferred list read", Duration::from_secs(1));
        advance(Duration::from_secs(10)).await;
        assert_eq!(
            ran(&h, "o"),
            tasks.iter().map(Task::key).collect::<Vec<_>>()
        );
    });
}

#[test]
fn reading_deferred_tasks_back_reads_only_their_ordering_ids_rows() {
    run_paused(|| async {
        // 20 orderingIds with 40 tasks each, all due, each orderingId's tasks together in the
        // schedule: an orderingId holds 4, so most of each one's tasks are deferred and read
        // back. A read-back reads its orderingId's rows, not every row of the partition from
        // its first deferred task on (issue 30, defect 10).
        let settings = SchedulingSettings {
            max_in_flight_tasks: 32,
            max_queued_per_ordering: 4,
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_millis(5), &[]);
        let mut all = Vec::new();
        for o in 0..20 {
            for i in 0..40 {
                let due = t0() + ms(o * 10 + i / 8);
                all.push(task(&format!("o{o:02}"), due, &format!("{i:02}")));
            }
        }
        let all: Vec<Task> = all.into_iter().map(|t| h.enqueued(t)).collect();
        h.store.persist(P, all.clone()).await.expect("persist");
        h.assign().await;
        advance(Duration::from_secs(60)).await;
        for o in 0..20 {
            let o = format!("o{o:02}");
            let expected: Vec<TaskKey> = (all.iter().filter(|t| t.ordering_id == o))
                .map(Task::key)
                .collect();
            assert_eq!(ran(&h, &o), expected, "{o}: each once, in order");
        }
        // Loads read each row about once (a load after a deferral may read a few again), a
        // read-back each deferred task's row once more, and its list's row. Reading the
        // schedule from the first deferred task on read 133,081 rows here.
        let (rows, listed) = (h.store.schedule_rows_read(), h.store.deferred_rows_read());
        let n = all.len();
        assert!(rows <= 3 * n, "{rows} schedule rows read to run {n} tasks");
        assert!(
            listed <= n,
            "{listed} rows of deferred-task lists read for {n} tasks"
        );
        assert_eq!(
            h.store.deferred_listed(P),
            0,
            "every list row read back is deleted"
        );
    });
}

#[test]
fn reading_deferred_tasks_back_steps_over_no_finished_tasks_tombstones() {
    run_paused(|| async {
        // One orderingId's 400 tasks due at one time (a tenant's batch), keys whose text order
        // is not their run order: most are deferred and read back, while the ones already run
        // leave their rows' tombstones among them. A read by key runs down over its key's
        // prefix, and Cassandra 2.1 reads every tombstone there: reading each task back by key
        // stepped over 50,598 tombstones here, 318 in one read (the noisy-neighbour bench at 200,000 had
        // Cassandra in back-to-back full GCs, "Read 1 live and 1122 tombstoned cells").
        let settings = SchedulingSettings {
            max_in_flight_tasks: 64,
            max_queued_per_ordering: 16,
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_millis(5), &[]);
        let all: Vec<Task> = (0..400)
            .map(|i| h.enqueued(task("batch", t0(), &format!("{i}"))))
            .collect();
        h.store.persist(P, all.clone()).await.expect("persist");
        h.assign().await;
        advance(Duration::from_secs(60)).await;
        let expected: Vec<TaskKey> = all.iter().map(Task::key).collect();
        assert_eq!(ran(&h, "batch"), expected, "each once, in order");
        let (tombstones, n) = (h.store.tombstones_read(), all.len());
        assert!(
            tombstones <= n,
            "{tombstones} tombstones stepped over to run {n} tasks (most in one read: {:?})",
            h.store.most_tombstones_in_a_read()
        );
    });
}
