//! Conflict modes, reschedules and cancels by identity: resolved in partition order by the tree
//! that owns the partition; a task no longer its identity's current one never runs; a batch
//! polled again applies nothing twice.

use super::*;
use crate::actors::IdentityOp;
use scheduler_client::{OnConflict, TaskIdentity};

fn with_data(ordering_id: &str, at: DateTime<Utc>, version: i64) -> Task {
    let data = serde_json::json!({ "v": version });
    Task::new(
        ordering_id,
        at,
        "id",
        data.as_object().cloned().unwrap_or_default(),
    )
}

fn schedule(ordering_id: &str, at: DateTime<Utc>, version: i64, mode: OnConflict) -> IdentityOp {
    IdentityOp::Schedule(with_data(ordering_id, at, version).on_conflict(mode))
}

fn identity(ordering_id: &str) -> TaskIdentity {
    TaskIdentity::new(ordering_id, "id")
}

#[test]
fn replace_runs_only_the_newest_task_at_its_own_time_with_its_data() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.assign().await;
        h.by_identity(vec![schedule(
            "r",
            t0() + ms(10_000),
            1,
            OnConflict::Replace,
        )])
        .await;
        advance(Duration::from_secs(2)).await;
        h.by_identity(vec![schedule(
            "r",
            t0() + ms(20_000),
            2,
            OnConflict::Replace,
        )])
        .await;
        advance(Duration::from_secs(60)).await;
        assert_eq!(h.recorder.call_times("r"), [t0() + ms(20_000)]);
        assert_eq!(h.recorder.data_versions("r"), [2]);
        // Replacing back to the first time runs a task there again.
        h.by_identity(vec![schedule(
            "r",
            t0() + ms(70_000),
            3,
            OnConflict::Replace,
        )])
        .await;
        advance(Duration::from_secs(30)).await;
        assert_eq!(h.recorder.data_versions("r"), [2, 3]);
    });
}

/// The task a conflict mode made current runs with the enqueue offset of its record, as the
/// store keeps it (`task_identities` keeps the record's offset, not the task's field: Cassandra
/// read the task back without one, and a replaced task ran with none: issue 30's CI run of the
/// it-test `python_producer`).
#[test]
fn a_replacing_task_runs_with_the_enqueue_offset_of_its_record() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.assign().await;
        let first = h
            .by_identity(vec![schedule(
                "o",
                t0() + ms(10_000),
                1,
                OnConflict::Replace,
            )])
            .await;
        let second = h
            .by_identity(vec![schedule(
                "o",
                t0() + ms(20_000),
                2,
                OnConflict::Replace,
            )])
            .await;
        advance(Duration::from_secs(60)).await;
        assert_eq!(h.recorder.data_versions("o"), [2]);
        assert_ne!(first[0].offset(), second[0].offset());
        assert_eq!(h.recorder.enqueue_offsets("o"), [Some(second[0].offset())]);
    });
}

#[test]
fn keep_time_takes_the_new_data_at_the_pending_time() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.assign().await;
        h.by_identity(vec![schedule(
            "k",
            t0() + ms(10_000),
            1,
            OnConflict::KeepTime,
        )])
        .await;
        advance(Duration::from_secs(5)).await;
        h.by_identity(vec![schedule(
            "k",
            t0() + ms(40_000),
            2,
            OnConflict::KeepTime,
        )])
        .await;
        advance(Duration::from_secs(60)).await;
        assert_eq!(h.recorder.call_times("k"), [t0() + ms(10_000)]);
        assert_eq!(h.recorder.data_versions("k"), [2]);
    });
}

#[test]
fn fifty_debounced_submits_run_once_at_the_last_time_but_never_beyond_max_wait() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.assign().await;
        let debounce = OnConflict::Debounce {
            max_wait: Duration::from_secs(10),
        };
        // Each submit asks for 3 s after it; they come 100 ms apart, some in one batch.
        for i in 0..50 {
            let at = t0() + ms(3_000 + i * 100);
            let ops = vec![
                schedule("d", at, i, debounce),
                schedule("e", at, i, debounce),
            ];
            h.by_identity(ops).await;
            advance(Duration::from_millis(100)).await;
        }
        advance(Duration::from_secs(30)).await;
        // "d": the last asked for 7.9 s, within 10 s of the first (3 s): once, then, last data.
        assert_eq!(h.recorder.call_times("d"), [t0() + ms(7_900)]);
        assert_eq!(h.recorder.data_versions("d"), [49]);

        // With a 2 s max wait, a steady stream (each submit asking for 1 s after it) still runs
        // 2 s after its first time; later submits start a new chain.
        let tight = OnConflict::Debounce {
            max_wait: Duration::from_secs(2),
        };
        let start = t0() + ms(35_000);
        assert_eq!(h.recorder.clock.now(), start);
        for i in 0..50 {
            let at = start + ms(1_000 + i * 100);
            h.by_identity(vec![schedule("t", at, i, tight)]).await;
            advance(Duration::from_millis(100)).await;
        }
        advance(Duration::from_secs(30)).await;
        let times = h.recorder.call_times("t");
        assert_eq!(times[0], start + ms(3_000), "{times:?}");
        assert!(
            times.len() >= 2,
            "the stream after the first run starts a new chain"
        );
    });
}

/// A debounce wait the decoder now refuses (past `wire::MAX_DEBOUNCE_WAIT_MS`) may still be in
/// a row stored before: it caps nothing (the sum past chrono's range panicked the tree).
#[test]
fn a_debounce_wait_past_chronos_range_caps_nothing() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.assign().await;
        let endless = OnConflict::Debounce {
            max_wait: Duration::MAX,
        };
        h.by_identity(vec![schedule("w", t0() + ms(1_000), 1, endless)])
            .await;
        h.by_identity(vec![schedule("w", t0() + ms(2_000), 2, endless)])
            .await;
        advance(Duration::from_secs(5)).await;
        assert_eq!(h.recorder.call_times("w"), [t0() + ms(2_000)]);
        assert_eq!(h.recorder.data_versions("w"), [2]);
    });
}

#[test]
fn if_absent_from_twenty_producers_runs_once_and_a_finished_task_keeps_it_absent() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.assign().await;
        // Twenty producers race: some records land in one batch, some in others.
        for batch in 0..5 {
            let ops = (0..4)
                .map(|i| {
                    schedule(
                        "s",
                        t0() + ms(5_000 + batch * 400 + i),
                        batch * 4 + i,
                        OnConflict::IfAbsent,
                    )
                })
                .collect();
            h.by_identity(ops).await;
        }
        advance(Duration::from_secs(30)).await;
        assert_eq!(h.recorder.call_times("s"), [t0() + ms(5_000)]);
        // Finished within the retention: still there.
        h.by_identity(vec![schedule(
            "s",
            t0() + ms(40_000),
            99,
            OnConflict::IfAbsent,
        )])
        .await;
        advance(Duration::from_secs(30)).await;
        assert_eq!(h.recorder.call_times("s").len(), 1);
        assert!(h
            .metrics
            .encode(&h.in_flight)
            .contains(r#"scheduler_identity_records_total{op="ifAbsent",result="ignored"} 20"#));
    });
}

#[test]
fn reschedule_moves_and_cancel_stops_the_pending_task_of_an_identity() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.assign().await;
        let replace = OnConflict::Replace;
        h.by_identity(vec![
            schedule("early", t0() + ms(30_000), 1, replace),
            schedule("late", t0() + ms(5_000), 1, replace),
            schedule("gone", t0() + ms(5_000), 1, replace),
        ])
        .await;
        h.by_identity(vec![
            IdentityOp::Reschedule {
                identity: identity("early"),
                to: t0() + ms(2_000),
                offset: 0,
            },
            IdentityOp::Reschedule {
                identity: identity("late"),
                to: t0() + ms(20_000),
                offset: 0,
            },
            IdentityOp::Cancel {
                identity: identity("gone"),
                offset: 0,
            },
            // Nothing pending: ignored.
            IdentityOp::Cancel {
                identity: identity("never"),
                offset: 0,
            },
        ])
        .await;
        advance(Duration::from_secs(60)).await;
        assert_eq!(h.recorder.call_times("early"), [t0() + ms(2_000)]);
        assert_eq!(h.recorder.data_versions("early"), [1]);
        assert_eq!(h.recorder.call_times("late"), [t0() + ms(20_000)]);
        assert!(h.recorder.call_times("gone").is_empty());
        let gone = with_data("gone", t0() + ms(5_000), 1).key();
        assert_eq!(
            h.store.status_of(P, &gone).map(|s| s.status),
            Some(TaskStatus::Cancelled)
        );
        // A cancelled identity is absent again, also at the cancelled task's time.
        h.by_identity(vec![schedule(
            "gone",
            t0() + ms(65_000),
            2,
            OnConflict::IfAbsent,
        )])
        .await;
        h.by_identity(vec![schedule("gone", t0() + ms(5_000), 3, replace)])
            .await;
        advance(Duration::from_secs(10)).await;
        assert_eq!(h.recorder.data_versions("gone"), [3]);
    });
}

#[test]
fn a_batch_polled_again_applies_nothing_twice() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.assign().await;
        let first = h
            .by_identity(vec![schedule(
                "p",
                t0() + ms(10_000),
                1,
                OnConflict::Replace,
            )])
            .await;
        h.by_identity(vec![schedule(
            "p",
            t0() + ms(20_000),
            2,
            OnConflict::Replace,
        )])
        .await;
        // The first record comes again (a rebalance before its offset was committed): it does
        // not replace its successor.
        h.process(PolledTasks {
            by_identity: first,
            ..PolledTasks::default()
        })
        .await;
        advance(Duration::from_secs(60)).await;
        assert_eq!(h.recorder.call_times("p"), [t0() + ms(20_000)]);
        assert_eq!(h.recorder.data_versions("p"), [2]);
    });
}

#[test]
fn a_replaced_task_already_waiting_for_its_time_does_not_run() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.assign().await;
        h.by_identity(vec![schedule(
            "w",
            t0() + ms(2_000),
            1,
            OnConflict::Replace,
        )])
        .await;
        // Dispatched a second early, its checks done: replaced 200 ms before its time.
        advance(Duration::from_millis(1_800)).await;
        h.by_identity(vec![schedule(
            "w",
            t0() + ms(9_000),
            2,
            OnConflict::Replace,
        )])
        .await;
        advance(Duration::from_secs(30)).await;
        assert_eq!(h.recorder.call_times("w"), [t0() + ms(9_000)]);
    });
}

/// A record giving an identity new data at the time of its task that has just run to its end
/// (a `keepTime` or `debounce` arriving as the call ends, a `replace` at the same time) made
/// current the finished task's own key: the task counted as finished and the new data never ran
/// (the simulation's update-while-running workload: 28 of 500 seeds). It runs 1 ms later.
#[test]
fn a_record_at_the_time_of_its_finished_task_runs_the_new_data() {
    for mode in [
        OnConflict::KeepTime,
        OnConflict::Replace,
        OnConflict::Debounce {
            max_wait: Duration::from_secs(5),
        },
    ] {
        run_paused(|| async {
            let h = Harness::new(SchedulingSettings::default(), Duration::from_secs(2), &[]);
            h.assign().await;
            let at = t0() + ms(2_000);
            h.by_identity(vec![schedule("k", at, 1, OnConflict::Replace)])
                .await;
            advance(Duration::from_secs(10)).await;
            assert_eq!(h.recorder.data_versions("k"), [1], "{mode:?}");
            h.by_identity(vec![schedule("k", at, 2, mode)]).await;
            advance(Duration::from_secs(30)).await;
            assert_eq!(h.recorder.data_versions("k"), [1, 2], "{mode:?}");
            let second = with_data("k", at + ms(1), 2).key();
            let status = h.store.status_of(P, &second).map(|s| s.status);
            assert_eq!(status, Some(TaskStatus::Completed), "{mode:?}");
        });
    }
}

/// A record whose time is that of its identity's finished task moves 1 ms later, onto the key
/// of the task it replaces (pending there, itself moved 1 ms after the finished one, and held
/// behind another call of its orderingId): the new data takes that key, and its row is not
/// deleted as a superseded one's. Until the simulation found it (seed 163, a debounce aimed at
/// a rebalance) the supersede was decided before the move, and the current task was lost.
#[test]
fn a_record_moved_onto_the_key_of_the_task_it_replaces_is_not_deleted_with_it() {
    for mode in [
        OnConflict::Replace,
        OnConflict::Debounce {
            max_wait: Duration::from_secs(60),
        },
    ] {
        run_paused(|| async {
            let h = Harness::new(SchedulingSettings::default(), Duration::from_secs(2), &[]);
            h.assign().await;
            let at = t0() + ms(1_000);
            h.by_identity(vec![schedule("k", at, 1, OnConflict::Replace)])
                .await;
            // Version 1 runs from 1 s to 3 s; another task of the orderingId from 3.5 s to 5.5 s.
            advance(Duration::from_millis(3_500)).await;
            h.enqueue(vec![task("k", t0() + ms(3_500), "other")]).await;
            advance(Duration::from_millis(200)).await;
            // Version 2 at the finished task's time: 1 ms later, pending behind the other call.
            h.by_identity(vec![schedule("k", at, 2, OnConflict::Replace)])
                .await;
            advance(Duration::from_millis(200)).await;
            // Version 3 at that time again, also moved 1 ms later: onto version 2's key.
            h.by_identity(vec![schedule("k", at, 3, mode)]).await;
            let key = with_data("k", at + ms(1), 3).key();
            assert!(
                h.store.scheduled(P).contains(&key),
                "{mode:?}: its row is kept"
            );
            // The next tree, loading from the store, runs it.
            h.topic.send(RevokePartitions).await.expect("revoke");
            h.assign().await;
            advance(Duration::from_secs(30)).await;
            // (The other task's data has no version: -1.)
            let versions = h.recorder.data_versions("k");
            assert_eq!(versions, [1, -1, 3], "{mode:?}");
            let status = h.store.status_of(P, &key).map(|s| s.status);
            assert_eq!(status, Some(TaskStatus::Completed), "{mode:?}");
        });
    }
}

/// A keepTime record with new data arriving while its task's call runs (8 s calls): the call
/// finishes with the data it was given, and the new data runs after it, as a new version of the
/// task (1 ms after the running one's time), not lost under the finished key.
#[test]
fn a_keep_time_arriving_while_its_task_runs_runs_the_new_data_after_it() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::from_secs(8), &[]);
        h.assign().await;
        let at = t0() + ms(2_000);
        h.by_identity(vec![schedule("k", at, 1, OnConflict::KeepTime)])
            .await;
        // The call runs from 2 s to 10 s.
        advance(Duration::from_secs(3)).await;
        assert_eq!(h.recorder.data_versions("k"), [1]);
        h.by_identity(vec![schedule("k", at, 2, OnConflict::KeepTime)])
            .await;
        advance(Duration::from_secs(30)).await;
        assert_eq!(h.recorder.data_versions("k"), [1, 2]);
        assert_eq!(h.recorder.call_times("k"), [at, t0() + ms(10_000)]);
        assert_eq!(overlaps(&h), 0);
        let (first, second) = (
            with_data("k", at, 1).key(),
            with_data("k", at + ms(1), 2).key(),
        );
        for key in [&first, &second] {
            let status = h.store.status_of(P, key).map(|s| s.status);
            assert_eq!(status, Some(TaskStatus::Completed), "{key}");
        }
    });
}

/// A debounce record with new data arriving while its chain's task runs, the chain at its
/// max wait (so the record resolves to the running task's own time): it starts a new chain
/// that runs after the call, with the new data.
#[test]
fn a_debounce_arriving_while_its_task_runs_starts_a_chain_that_runs_after_it() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::from_secs(8), &[]);
        h.assign().await;
        let debounce = OnConflict::Debounce {
            max_wait: Duration::from_secs(1),
        };
        h.by_identity(vec![schedule("d", t0() + ms(2_000), 1, debounce)])
            .await;
        // Capped at the first time plus the max wait: 3 s. The call runs from 3 s to 11 s.
        h.by_identity(vec![schedule("d", t0() + ms(5_000), 2, debounce)])
            .await;
        advance(Duration::from_secs(4)).await;
        assert_eq!(h.recorder.data_versions("d"), [2]);
        h.by_identity(vec![schedule("d", t0() + ms(6_000), 3, debounce)])
            .await;
        // A second record during the call debounces within the new chain.
        advance(Duration::from_secs(1)).await;
        h.by_identity(vec![schedule("d", t0() + ms(6_500), 4, debounce)])
            .await;
        advance(Duration::from_secs(30)).await;
        assert_eq!(h.recorder.data_versions("d"), [2, 4]);
        assert_eq!(
            h.recorder.call_times("d"),
            [t0() + ms(3_000), t0() + ms(11_000)]
        );
        assert_eq!(overlaps(&h), 0);
    });
}

/// A keepTime record arriving after its task was dispatched (its checks done, waiting for its
/// time) but before the call: the call is made at the kept time with the new data, once.
#[test]
fn a_keep_time_arriving_as_its_task_waits_for_its_time_runs_the_new_data_at_it() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::from_secs(2), &[]);
        h.assign().await;
        let at = t0() + ms(3_000);
        h.by_identity(vec![schedule("k", at, 1, OnConflict::KeepTime)])
            .await;
        // Dispatched a second early: checked, waiting for its time.
        advance(Duration::from_millis(2_500)).await;
        h.by_identity(vec![schedule("k", at, 2, OnConflict::KeepTime)])
            .await;
        advance(Duration::from_secs(30)).await;
        assert_eq!(h.recorder.data_versions("k"), [2]);
        assert_eq!(h.recorder.call_times("k"), [at]);
    });
}

/// A replace at the running task's own time (the same key): the new task runs after the call.
#[test]
fn a_replace_at_the_time_of_its_running_task_runs_after_it() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::from_secs(8), &[]);
        h.assign().await;
        let at = t0() + ms(2_000);
        h.by_identity(vec![schedule("r", at, 1, OnConflict::Replace)])
            .await;
        advance(Duration::from_secs(3)).await;
        h.by_identity(vec![schedule("r", at, 2, OnConflict::Replace)])
            .await;
        advance(Duration::from_secs(30)).await;
        assert_eq!(h.recorder.data_versions("r"), [1, 2]);
        assert_eq!(h.recorder.call_times("r"), [at, t0() + ms(10_000)]);
    });
}

/// A keepTime record arriving while its task is due and queued behind another task of its
/// orderingId (in memory with its old data): the task runs the new data, once.
#[test]
fn a_keep_time_arriving_while_its_task_queues_behind_its_ordering_id_runs_the_new_data() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::from_secs(8), &[]);
        h.assign().await;
        h.enqueue(vec![task("q", t0() + ms(1_000), "first")]).await;
        let at = t0() + ms(2_000);
        h.by_identity(vec![schedule("q", at, 1, OnConflict::KeepTime)])
            .await;
        // "first" runs from 1 s to 9 s; the identity's task is due at 2 s and waits for it.
        advance(Duration::from_secs(4)).await;
        h.by_identity(vec![schedule("q", at, 2, OnConflict::KeepTime)])
            .await;
        advance(Duration::from_secs(30)).await;
        assert_eq!(h.recorder.data_versions("q"), [-1, 2]);
        assert_eq!(
            h.recorder.call_times("q"),
            [t0() + ms(1_000), t0() + ms(9_000)]
        );
    });
}

/// A first tree dispatches identity `d`'s task (due at 3.5 s, a 5 s call) at 2.5 s: its lease
/// entry, ownership and status checks are done. At 3.1 s, just after that tree's periodic epoch
/// read, a second node claims the partition and polls a replace of `d` (due at 20 s). Returns
/// both nodes.
async fn a_newer_tree_polls_a_replace() -> (Harness, Harness) {
    let h = Harness::new(SchedulingSettings::default(), Duration::from_secs(5), &[]);
    let other = h.second_node(SchedulingSettings::default());
    h.assign().await;
    h.by_identity(vec![schedule(
        "d",
        t0() + ms(3_500),
        1,
        OnConflict::Replace,
    )])
    .await;
    advance(Duration::from_millis(3_100)).await;
    other.assign().await;
    other
        .by_identity(vec![schedule(
            "d",
            t0() + ms(20_000),
            2,
            OnConflict::Replace,
        )])
        .await;
    (h, other)
}

/// The first tree's call of the replaced task starts at 3.5 s, before it learns of the claim:
/// the newer task's record must not be written before that call (issue 30, defect 3: it was
/// written at 3.1 s, and the replaced task ran after it was superseded). The replace waits,
/// durably, for the earlier tree's call to end.
#[test]
fn a_replace_an_earlier_trees_call_could_defeat_is_applied_only_after_that_call() {
    run_paused(|| async {
        let (h, _other) = a_newer_tree_polls_a_replace().await;
        advance(Duration::from_millis(2_500)).await;
        assert_eq!(
            h.recorder.call_times("d"),
            [t0() + ms(3_500)],
            "the earlier tree called the task it had checked"
        );
        let newer_written = |h: &Harness| {
            h.store
                .identity_writes()
                .iter()
                .any(|(record, _)| record.task.scheduled_time == t0() + ms(20_000))
        };
        assert!(
            !newer_written(&h),
            "the newer task's record is not written while a call of the task it replaces, \
             started after the replace was polled, runs"
        );
        assert_eq!(
            h.store
                .deferred_identity_records(P)
                .await
                .expect("read")
                .len(),
            1,
            "deferred, durably (the batch was acknowledged)"
        );
        advance(Duration::from_secs(60)).await;
        assert!(newer_written(&h), "written once the earlier call ended");
        assert_eq!(h.recorder.data_versions("d"), [1, 2]);
        assert_eq!(
            h.recorder.call_times("d"),
            [t0() + ms(3_500), t0() + ms(20_000)]
        );
        assert!(h
            .store
            .deferred_identity_records(P)
            .await
            .expect("read")
            .is_empty());
    });
}

/// Deferred identity records outlive the tree that deferred them, and keep their order: the
/// next tree applies them, and a record of their orderingId it polls waits behind them.
#[test]
fn deferred_identity_records_left_by_a_stopped_tree_are_applied_by_the_next_in_order() {
    run_paused(|| async {
        let (h, other) = a_newer_tree_polls_a_replace().await;
        let third = h.second_node(SchedulingSettings::default());
        advance(Duration::from_millis(1_000)).await;
        // The tree that deferred it goes before the earlier call ends; a third takes over and
        // polls a keepTime of the identity: it applies after the replace, at the replace's time.
        other.topic.send(RevokePartitions).await.expect("revoke");
        third.assign().await;
        third
            .by_identity(vec![schedule(
                "d",
                t0() + ms(30_000),
                3,
                OnConflict::KeepTime,
            )])
            .await;
        advance(Duration::from_secs(60)).await;
        assert_eq!(h.recorder.data_versions("d"), [1, 3]);
        assert_eq!(
            h.recorder.call_times("d"),
            [t0() + ms(3_500), t0() + ms(20_000)]
        );
        assert!(h
            .store
            .deferred_identity_records(P)
            .await
            .expect("read")
            .is_empty());
    });
}

/// A dead-lettered task of an `ifAbsent` identity (a group's join is one) redriven as the admin
/// API redrives it runs again: its own dead task counts as one that finished within the status
/// retention, so the redrive, were it `ifAbsent` too, would be ignored (until issue 30's
/// simulation redrove dead letters, a redriven join never ran).
#[test]
fn a_redriven_dead_letter_of_an_if_absent_identity_runs_again() {
    use crate::store::DeadLetterStore;
    run_paused(|| async {
        let h = Harness::new(
            SchedulingSettings::default(),
            Duration::ZERO,
            &[("gives-up", Behaviour::GiveUp)],
        );
        h.assign().await;
        let first = with_data("gives-up", t0() + ms(1_000), 1);
        h.by_identity(vec![IdentityOp::Schedule(
            first.clone().on_conflict(OnConflict::IfAbsent),
        )])
        .await;
        advance(Duration::from_secs(5)).await;
        assert_eq!(h.recorder.call_times("gives-up").len(), 1);
        let letter = (h.store.dead_letter(first.key()).await)
            .expect("read")
            .expect("its dead letter");
        let again = letter.redriven(t0() + ms(6_000));
        h.by_identity(vec![IdentityOp::Schedule(again.clone())])
            .await;
        advance(Duration::from_secs(5)).await;
        assert_eq!(
            h.recorder.call_times("gives-up"),
            [first.scheduled_time, again.scheduled_time],
            "the redriven task ran"
        );
    });
}
