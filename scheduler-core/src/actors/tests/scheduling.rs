//! When tasks run: on time, in order per orderingId, ties in enqueue order, loaded or pushed.

use super::*;

#[test]
fn due_tasks_run_at_once_and_future_tasks_at_their_exact_time() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.assign().await;
        h.enqueue(vec![
            task("b", t0() + ms(10_000), "1"),
            task("a", t0(), "1"),
            task("c", t0() + ms(10_500), "1"),
        ])
        .await;
        advance(Duration::from_secs(30)).await;
        let calls = h.recorder.calls();
        let got: Vec<(&str, i64)> = calls
            .iter()
            .map(|(k, at)| (k.ordering_id.as_str(), (*at - t0()).num_milliseconds()))
            .collect();
        assert_eq!(got, [("a", 0), ("b", 10_000), ("c", 10_500)]);
        for (key, _) in &calls {
            let status = h.store.status_of(P, key).expect("status recorded");
            assert_eq!((status.status, status.attempts), (TaskStatus::Completed, 1));
        }
        assert!(
            h.store.scheduled(P).is_empty(),
            "completed tasks leave the schedule"
        );
    });
}

#[test]
fn a_task_beyond_the_look_ahead_is_loaded_in_time_and_runs_on_time() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            max_look_ahead: Duration::from_secs(15),
            prefetch_window: Duration::from_secs(5),
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::ZERO, &[]);
        h.assign().await;
        h.enqueue(vec![task("far", t0() + ms(20_000), "1")]).await;
        advance(Duration::from_secs(1)).await;
        assert_eq!(
            h.store.loaded_rows(),
            0,
            "20 s ahead is past the 15 s look-ahead: not loaded yet"
        );
        advance(Duration::from_secs(30)).await;
        assert_eq!(h.recorder.call_times("far"), [t0() + ms(20_000)]);
    });
}

#[test]
fn tasks_enqueued_before_assignment_load_and_overdue_ones_run_at_once() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        // Persisted while no node owned the partition: one overdue by an hour, one in 3 s.
        h.store
            .persist(
                P,
                vec![
                    task("late", t0() - ms(3_600_000), "1"),
                    task("soon", t0() + ms(3_000), "1"),
                ],
            )
            .await
            .expect("persist");
        h.assign().await;
        advance(Duration::from_secs(10)).await;
        assert_eq!(h.recorder.call_times("late"), [t0()]);
        assert_eq!(h.recorder.call_times("soon"), [t0() + ms(3_000)]);
    });
}

#[test]
fn one_ordering_id_runs_its_tasks_in_schedule_order_one_at_a_time() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::from_millis(7), &[]);
        h.assign().await;
        let tasks: Vec<Task> = (0..200)
            .map(|i| task("serial", t0() + ms(i), &format!("{i:03}")))
            .collect();
        let expected: Vec<TaskKey> = tasks.iter().map(Task::key).collect();
        // Two batches, and other ordering ids interleaved, to show order is per ordering id.
        h.enqueue(tasks[..120].to_vec()).await;
        h.enqueue(
            (0..50)
                .map(|i| task(&format!("other-{i}"), t0() + ms(i), "x"))
                .collect(),
        )
        .await;
        h.enqueue(tasks[120..].to_vec()).await;
        advance(Duration::from_secs(10)).await;
        let serial: Vec<TaskKey> = h
            .recorder
            .calls()
            .into_iter()
            .map(|(k, _)| k)
            .filter(|k| k.ordering_id == "serial")
            .collect();
        assert_eq!(serial, expected);
        assert_eq!(
            h.recorder.overlaps.load(Ordering::SeqCst),
            0,
            "never two at once for one ordering id"
        );
        assert_eq!(h.recorder.calls().len(), 250);
    });
}

#[test]
fn the_same_task_scheduled_twice_runs_once() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.assign().await;
        let twice = task("dup", t0() + ms(2_000), "1");
        h.enqueue(vec![twice.clone()]).await;
        h.enqueue(vec![twice.clone()]).await;
        advance(Duration::from_secs(5)).await;
        h.enqueue(vec![twice]).await;
        advance(Duration::from_secs(5)).await;
        assert_eq!(h.recorder.call_times("dup"), [t0() + ms(2_000)]);
    });
}

#[test]
fn a_task_scheduled_slightly_in_the_past_after_others_ran_still_runs() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.assign().await;
        h.enqueue(vec![task("o", t0() + ms(1_000), "first")]).await;
        advance(Duration::from_secs(5)).await;
        // Now t0 + 5 s; a task 3 s in the past (within a grace window) for the same ordering id.
        h.enqueue(vec![task("o", t0() + ms(2_000), "late")]).await;
        advance(Duration::from_secs(1)).await;
        assert_eq!(
            h.recorder.call_times("o"),
            [t0() + ms(1_000), t0() + ms(5_000)]
        );
    });
}

#[test]
fn a_far_past_task_does_not_send_loading_back_years() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            max_in_flight_tasks: 4,
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::ZERO, &[]);
        h.assign().await;
        // Memory full of tasks not due yet; then a foreign producer's task due five years ago.
        let future: Vec<Task> = (0..4)
            .map(|i| task(&format!("f{i}"), t0() + ms(60_000), "1"))
            .collect();
        h.enqueue(future).await;
        advance(Duration::from_secs(1)).await;
        let before = h.store.buckets_read();
        let ancient = task("ancient", t0() - TimeDelta::days(5 * 365), "1");
        h.enqueue(vec![ancient]).await;
        advance(Duration::from_secs(120)).await;
        assert_eq!(h.recorder.call_times("ancient").len(), 1, "it runs");
        let walked = h.store.buckets_read() - before;
        assert!(walked < 1_000, "loading walked {walked} hour buckets");
    });
}

#[test]
fn a_node_is_ready_once_it_owns_partitions_and_loaded_each() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        assert!(!h.in_flight.ready(&[]), "owning nothing is not ready");
        h.store.set_latency("schedule load", Duration::from_secs(1));
        h.assign().await;
        advance(Duration::from_millis(500)).await;
        assert!(!h.in_flight.ready(&[P]), "the first load is under way");
        advance(Duration::from_secs(1)).await;
        assert!(h.in_flight.ready(&[P]));
    });
}

#[test]
fn tasks_due_at_one_time_run_in_enqueue_order_when_pushed() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::from_millis(3), &[]);
        h.assign().await;
        // Due now (run as they come) and due in 2 s (held, then dispatched together).
        let now = tied("now", t0(), 10);
        let soon = tied("soon", t0() + ms(2_000), 10);
        for (a, b) in now.chunks(3).zip(soon.chunks(3)) {
            h.enqueue(a.iter().chain(b).cloned().collect()).await;
        }
        advance(Duration::from_secs(5)).await;
        assert_eq!(
            ran(&h, "now"),
            now.iter().map(Task::key).collect::<Vec<_>>()
        );
        assert_eq!(
            ran(&h, "soon"),
            soon.iter().map(Task::key).collect::<Vec<_>>()
        );
    });
}

#[test]
fn tasks_due_at_one_time_run_in_enqueue_order_when_loaded_in_small_pages() {
    run_paused(|| async {
        // Pages of 4 rows split each group of ties; an orderingId may hold 2 tasks, so most
        // of them are deferred and read back.
        let settings = SchedulingSettings {
            fetch_batch_size: 4,
            max_in_flight_tasks: 8,
            max_queued_per_ordering: 2,
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_millis(3), &[]);
        let mut expected = Vec::new();
        let mut all = Vec::new();
        for (i, o) in ["a", "b", "c"].into_iter().enumerate() {
            for step in 0..3 {
                let group = tied(o, t0() + ms(100 * step + i as i64), 7);
                expected.extend(group.iter().filter(|t| t.ordering_id == "b").map(Task::key));
                all.extend(group);
            }
        }
        // Persisted in this order while no node owned the partition, then loaded.
        let all: Vec<Task> = all.into_iter().map(|t| h.enqueued(t)).collect();
        h.store.persist(P, all).await.expect("persist");
        h.assign().await;
        advance(Duration::from_secs(10)).await;
        assert_eq!(ran(&h, "b"), expected);
        for o in ["a", "c"] {
            assert_eq!(ran(&h, o).len(), 21);
        }
    });
}

#[test]
fn tasks_due_at_one_time_beyond_the_in_flight_room_run_in_enqueue_order() {
    run_paused(|| async {
        // A push beyond the room leaves the rest for loading.
        let settings = SchedulingSettings {
            fetch_batch_size: 5,
            max_in_flight_tasks: 6,
            max_queued_per_ordering: 6,
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_millis(3), &[]);
        h.assign().await;
        let ties = tied("deep", t0() + ms(1_000), 26);
        h.enqueue(ties.clone()).await;
        advance(Duration::from_secs(10)).await;
        assert_eq!(
            ran(&h, "deep"),
            ties.iter().map(Task::key).collect::<Vec<_>>()
        );
    });
}

#[test]
fn ties_enqueued_after_their_group_was_loaded_run_in_enqueue_order_whatever_their_keys() {
    run_paused(|| async {
        // Loads pause while more than 6 tasks are in memory.
        let settings = SchedulingSettings {
            fetch_batch_size: 8,
            max_in_flight_tasks: 8,
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_secs(5), &[]);
        // The first page reads six fillers, "o"/m and "p"/x; it ends before "p"'s ties, so the
        // read cursor stands right after "o"/m, and seven tasks in memory stop further loads.
        let mut rows: Vec<Task> = (1..=6).map(|i| task(&format!("f{i}"), t0(), "1")).collect();
        let m = task("o", t0(), "m");
        rows.push(m.clone());
        rows.push(task("p", t0(), "x"));
        let rows: Vec<Task> = rows.into_iter().map(|t| h.enqueued(t)).collect();
        h.store.persist(P, rows).await.expect("persist");
        h.assign().await;
        advance(Duration::from_millis(100)).await;
        // Two more ties of "o": the first sorts after the cursor, the second before it.
        let (first, second) = (task("o", t0(), "z"), task("o", t0(), "c"));
        h.enqueue(vec![first.clone()]).await;
        h.enqueue(vec![second.clone()]).await;
        advance(Duration::from_secs(60)).await;
        assert_eq!(ran(&h, "o"), vec![m.key(), first.key(), second.key()]);
    });
}

#[test]
fn a_task_is_called_at_its_time_although_its_checks_take_long() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.assign().await;
        advance(Duration::from_secs(1)).await;
        // A slow Cassandra: the lease write, the ownership read after it and the status read
        // take 600 ms in all. They are done before the task's time (the default 1 s lead).
        for operation in ["lease write", "epoch read", "status read"] {
            h.store.set_latency(operation, Duration::from_millis(200));
        }
        h.enqueue(vec![task("a", t0() + ms(10_000), "1")]).await;
        advance(Duration::from_secs(20)).await;
        assert_eq!(h.recorder.call_times("a"), [t0() + ms(10_000)]);
    });
}

#[test]
fn a_task_that_waited_long_for_an_executor_slot_is_called_as_its_slot_comes() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            executor_concurrency: 1,
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_secs(2), &[]);
        h.assign().await;
        advance(Duration::from_secs(1)).await;
        for operation in ["lease write", "epoch read", "status read"] {
            h.store.set_latency(operation, Duration::from_millis(200));
        }
        // `b` is due while `a` holds the only slot: its checks are made before its time, and
        // its slot comes a second after it. It is called then, with no store read in the slot
        // (a newer owner's cancel of it is deferred while this tree's lease entry lives: see
        // `cancels::a_cancel_polled_by_a_newer_tree_while_..._long_for_a_slot_...`).
        h.enqueue(vec![
            task("a", t0() + ms(10_000), "1"),
            task("b", t0() + ms(11_000), "1"),
        ])
        .await;
        advance(Duration::from_secs(20)).await;
        assert_eq!(h.recorder.call_times("a"), [t0() + ms(10_000)]);
        assert_eq!(h.recorder.call_times("b"), [t0() + ms(12_000)]);
    });
}

#[test]
fn a_batch_whose_write_failed_halfway_runs_in_order_when_it_comes_again() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            max_look_ahead: Duration::from_secs(2),
            prefetch_window: Duration::from_secs(1),
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::ZERO, &[]);
        h.assign().await;
        advance(Duration::from_secs(4)).await;
        // Loading has passed 5 s. A batch with a task of "a" there and its next one at 6.5 s is
        // written, then its cancel fails: the batch fails, its rows are in the store.
        let first = h.enqueued(task("a", t0() + ms(5_000), "1"));
        let second = h.enqueued(task("a", t0() + ms(6_500), "2"));
        let batch = || PolledTasks {
            tasks: vec![first.clone(), second.clone()],
            cancels: vec![task("z", t0() + ms(60_000), "1").key()],
            ..PolledTasks::default()
        };
        h.store.fail_op("status write if absent", 1);
        let reply = h.offer(batch()).await;
        assert!(reply.persisted.is_empty(), "the cancel failed");
        // Loading goes on meanwhile; the consumer offers the batch again at 6 s.
        advance(Duration::from_secs(2)).await;
        let reply = h.offer(batch()).await;
        assert_eq!(reply.persisted, vec![P], "{:?}", reply.failed);
        advance(Duration::from_secs(30)).await;
        let calls = h.recorder.calls();
        let got: Vec<&str> = calls
            .iter()
            .filter(|(k, _)| k.ordering_id == "a")
            .map(|(k, _)| k.uniqueness_key.as_str())
            .collect();
        assert_eq!(
            got,
            ["1", "2"],
            "the row of the second task, loaded before the batch came again, waits for the first"
        );
    });
}

#[test]
fn a_stale_tree_does_not_run_a_task_it_loaded_after_a_newer_tree_wrote_earlier_ones() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            max_look_ahead: Duration::from_secs(2),
            prefetch_window: Duration::from_secs(1),
            ..SchedulingSettings::default()
        };
        // Every call takes 2.2 s: the call of "a"/1 keeps the orderingId's lease entry from 0 s
        // to 2.2 s, and the next task of "a" takes it over at once.
        let h = Harness::new(settings.clone(), Duration::from_millis(2_200), &[]);
        let other = h.second_node(settings);
        h.assign().await;
        h.enqueue(vec![task("a", t0(), "1")]).await;
        advance(Duration::from_millis(1_050)).await;
        // The first tree's background read begun at 1 s vouches for it until 3 s; the reads it
        // begins from now on answer late, so it does not learn of the claim below.
        h.store.set_latency("epoch read", Duration::from_secs(10));
        advance(Duration::from_millis(50)).await;
        // Another node claims the partition at 1.1 s and persists the next two tasks of "a":
        // the first behind the first tree's loading (loaded to 3 s), the second ahead of it
        // (the first tree loads it at 2 s).
        other.assign().await;
        other
            .enqueue(vec![
                task("a", t0() + ms(1_500), "2"),
                task("a", t0() + ms(3_100), "3"),
            ])
            .await;
        advance(Duration::from_secs(20)).await;
        h.store.set_latency("epoch read", Duration::ZERO);
        advance(Duration::from_secs(60)).await;
        let calls = h.recorder.calls();
        let mut firsts: Vec<&str> = Vec::new();
        for (key, _) in &calls {
            if !firsts.contains(&key.uniqueness_key.as_str()) {
                firsts.push(key.uniqueness_key.as_str());
            }
        }
        assert_eq!(
            firsts,
            ["1", "2", "3"],
            "the first tree loaded 3 after the claim and must not run it before 2: {calls:?}"
        );
    });
}
